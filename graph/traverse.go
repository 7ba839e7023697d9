package graph

// BFS returns hop distances from the nearest of sources along out-arcs, -1
// for nodes it cannot reach. dist, when it has length N, is reused.
func (g *Graph) BFS(sources []int, dist []int) []int {
	n := g.N()
	if len(dist) != n {
		dist = make([]int, n)
	}
	for i := range dist {
		dist[i] = -1
	}
	queue := make([]int, 0, n)
	for _, s := range sources {
		if dist[s] == -1 {
			dist[s] = 0
			queue = append(queue, s)
		}
	}
	for head := 0; head < len(queue); head++ {
		u := queue[head]
		for _, v := range g.outTo[g.outOff[u]:g.outOff[u+1]] {
			if dist[v] == -1 {
				dist[v] = dist[u] + 1
				queue = append(queue, v)
			}
		}
	}
	return dist
}

// Components labels the weakly connected components: comp[i] is node i's
// component, numbered 0..count-1 in order of their smallest node.
func (g *Graph) Components() (comp []int, count int) {
	n := g.N()
	comp = make([]int, n)
	for i := range comp {
		comp[i] = -1
	}
	stack := make([]int, 0, n)
	for s := 0; s < n; s++ {
		if comp[s] != -1 {
			continue
		}
		comp[s] = count
		stack = append(stack[:0], s)
		for len(stack) > 0 {
			u := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, adj := range [2][]int{g.outTo[g.outOff[u]:g.outOff[u+1]], g.inFrom[g.inOff[u]:g.inOff[u+1]]} {
				for _, v := range adj {
					if comp[v] == -1 {
						comp[v] = count
						stack = append(stack, v)
					}
				}
			}
		}
		count++
	}
	return comp, count
}
