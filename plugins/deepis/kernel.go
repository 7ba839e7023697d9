package deepis

// The propagation and hop loops of an unweighted graph are gathers: for
// one node, combine the rows-long blocks src[u*rows : (u+1)*rows] of its
// neighbours u. A batch of R = 8 restarts (Solve's default) makes each
// block one cache line; the 8-wide kernels keep the running values in
// registers, where the generic loop would load and store them at every
// arc (4-wide kernels take a batch split over two workers). Profiled on
// Jazz (198 nodes, 5,484 arcs, 8 rows) the generic loops were about half
// of a VJP call. The sum and product kernels are written out separately on
// purpose: an operation passed in (a func or a generic type parameter) is
// a call per element, which is what they exist to avoid.

// sumGather sets dst[b] = sum over u in from of src[u*rows+b], b < rows.
func sumGather(dst, src []float64, from []int, rows int) { gather(dst, src, from, rows, false) }

// prodGather sets dst[b] = product over u in from of src[u*rows+b].
func prodGather(dst, src []float64, from []int, rows int) { gather(dst, src, from, rows, true) }

// gather is sumGather, or prodGather when product is set: blocks of 8 and
// then 4 rows through the register kernels, the rest in a plain loop.
func gather(dst, src []float64, from []int, rows int, product bool) {
	o := 0
	for ; o+8 <= rows; o += 8 {
		if product {
			prod8((*[8]float64)(dst[o:]), src, from, rows, o)
		} else {
			sum8((*[8]float64)(dst[o:]), src, from, rows, o)
		}
	}
	if o+4 <= rows {
		if product {
			prod4((*[4]float64)(dst[o:]), src, from, rows, o)
		} else {
			sum4((*[4]float64)(dst[o:]), src, from, rows, o)
		}
		o += 4
	}
	if o == rows {
		return
	}
	d := dst[o:rows]
	for b := range d {
		d[b] = 0
		if product {
			d[b] = 1
		}
	}
	for _, u := range from {
		for b, s := range src[u*rows+o : (u+1)*rows] {
			if product {
				d[b] *= s
			} else {
				d[b] += s
			}
		}
	}
}

// sum8 is sumGather for the 8 values at offset o of each block.
func sum8(dst *[8]float64, src []float64, from []int, rows, o int) {
	var s0, s1, s2, s3, s4, s5, s6, s7 float64
	for _, u := range from {
		s := (*[8]float64)(src[u*rows+o:])
		s0 += s[0]
		s1 += s[1]
		s2 += s[2]
		s3 += s[3]
		s4 += s[4]
		s5 += s[5]
		s6 += s[6]
		s7 += s[7]
	}
	*dst = [8]float64{s0, s1, s2, s3, s4, s5, s6, s7}
}

// prod8 is prodGather for the 8 values at offset o of each block.
func prod8(dst *[8]float64, src []float64, from []int, rows, o int) {
	p0, p1, p2, p3, p4, p5, p6, p7 := 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0
	for _, u := range from {
		s := (*[8]float64)(src[u*rows+o:])
		p0 *= s[0]
		p1 *= s[1]
		p2 *= s[2]
		p3 *= s[3]
		p4 *= s[4]
		p5 *= s[5]
		p6 *= s[6]
		p7 *= s[7]
	}
	*dst = [8]float64{p0, p1, p2, p3, p4, p5, p6, p7}
}

// sum4 is sumGather for the 4 values at offset o of each block.
func sum4(dst *[4]float64, src []float64, from []int, rows, o int) {
	var s0, s1, s2, s3 float64
	for _, u := range from {
		s := (*[4]float64)(src[u*rows+o:])
		s0 += s[0]
		s1 += s[1]
		s2 += s[2]
		s3 += s[3]
	}
	*dst = [4]float64{s0, s1, s2, s3}
}

// prod4 is prodGather for the 4 values at offset o of each block.
func prod4(dst *[4]float64, src []float64, from []int, rows, o int) {
	p0, p1, p2, p3 := 1.0, 1.0, 1.0, 1.0
	for _, u := range from {
		s := (*[4]float64)(src[u*rows+o:])
		p0 *= s[0]
		p1 *= s[1]
		p2 *= s[2]
		p3 *= s[3]
	}
	*dst = [4]float64{p0, p1, p2, p3}
}
