package gat

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/nn"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
)

// leak is the negative slope of the LeakyReLU on attention logits, as in
// the GAT paper.
const leak = 0.2

// attention is one multi-head graph attention aggregation over an
// adjacency. Its input z holds, per node row, heads blocks of dim values
// (the output of the shared linear map W h). For head k, target v and
// source u in row v:
//
//	e_vu = LeakyReLU(a_dst_k . z_vk + a_src_k . z_uk)
//	α_vu = exp(e_vu) / sum_{u' in row v} exp(e_vu')
//	out_vk = sum_{u in row v} α_vu z_uk
//
// The layer's bias lives in the linear map before it: the α of a row sum
// to one, so a bias added to z passes through unchanged and shifts every
// logit of a row equally.
type attention struct {
	adj        *gnn.Rows
	heads, dim int

	// src and dst are heads x dim; gsrc and gdst their gradients.
	src, dst, gsrc, gdst []float64
	params               []*nn.Param

	// Caches of the last forward.
	batches int
	z       []float64 // rows x heads*dim, contiguous
	fs, fd  []float64 // rows x heads: a_src.z and a_dst.z
	pre     []float64 // batches x nnz x heads: logits before LeakyReLU
	alpha   []float64 // batches x nnz x heads
	out     *mat.Dense
	dz      *mat.Dense
	dfs     []float64
	dfd     []float64
	scratch [][]float64 // per worker, one row's edges x heads
}

func newAttention(adj *gnn.Rows, heads, dim int, name string, init func() float64) *attention {
	a := &attention{
		adj: adj, heads: heads, dim: dim,
		src:  make([]float64, heads*dim),
		dst:  make([]float64, heads*dim),
		gsrc: make([]float64, heads*dim),
		gdst: make([]float64, heads*dim),
	}
	for i := range a.src {
		a.src[i] = init()
		a.dst[i] = init()
	}
	a.params = []*nn.Param{
		{Name: name + ".att_src", Value: a.src, Grad: a.gsrc, Rows: heads, Cols: dim},
		{Name: name + ".att_dst", Value: a.dst, Grad: a.gdst, Rows: heads, Cols: dim},
	}
	return a
}

// forward aggregates z (batches*n rows, heads*dim columns) and returns the
// aggregated rows, owned by the layer until the next forward.
func (a *attention) forward(z *mat.Dense, batches int) *mat.Dense {
	n, H, D := a.adj.N, a.heads, a.dim
	HD := H * D
	if r, c := z.Dims(); r != batches*n || c != HD {
		panic(fmt.Sprintf("gat: attention input %dx%d, want %dx%d", r, c, batches*n, HD))
	}
	rows := batches * n
	nnz := a.adj.NNZ()
	a.batches = batches
	a.z = gnn.Contiguous(a.z, z)
	a.fs = gnn.Grow(a.fs, rows*H)
	a.fd = gnn.Grow(a.fd, rows*H)
	a.pre = gnn.Grow(a.pre, batches*nnz*H)
	a.alpha = gnn.Grow(a.alpha, batches*nnz*H)
	a.out = nn.Reuse(a.out, rows, HD)
	zz := a.z
	for r := 0; r < rows; r++ {
		zr := zz[r*HD : (r+1)*HD]
		for k := 0; k < H; k++ {
			var s, d float64
			for j := 0; j < D; j++ {
				s += a.src[k*D+j] * zr[k*D+j]
				d += a.dst[k*D+j] * zr[k*D+j]
			}
			a.fs[r*H+k] = s
			a.fd[r*H+k] = d
		}
	}
	out := a.out.RawMatrix()
	a.each(batches, func(b int, scratch *[]float64) {
		base := b * n
		for v := 0; v < n; v++ {
			lo, hi := a.adj.Off[v], a.adj.Off[v+1]
			pre := a.pre[(b*nnz+lo)*H : (b*nnz+hi)*H]
			alpha := a.alpha[(b*nnz+lo)*H : (b*nnz+hi)*H]
			for k := 0; k < H; k++ {
				fd := a.fd[(base+v)*H+k]
				m := math.Inf(-1)
				for e := lo; e < hi; e++ {
					p := fd + a.fs[(base+a.adj.Src[e])*H+k]
					pre[(e-lo)*H+k] = p
					if p < 0 {
						p *= leak
					}
					alpha[(e-lo)*H+k] = p
					if p > m {
						m = p
					}
				}
				var sum float64
				for i := 0; i < hi-lo; i++ {
					ex := math.Exp(alpha[i*H+k] - m)
					alpha[i*H+k] = ex
					sum += ex
				}
				for i := 0; i < hi-lo; i++ {
					alpha[i*H+k] /= sum
				}
			}
			o := out.Data[(base+v)*out.Stride : (base+v)*out.Stride+HD]
			clear(o)
			for e := lo; e < hi; e++ {
				zu := zz[(base+a.adj.Src[e])*HD : (base+a.adj.Src[e]+1)*HD]
				al := alpha[(e-lo)*H : (e-lo+1)*H]
				for k := 0; k < H; k++ {
					w := al[k]
					ok := o[k*D : (k+1)*D]
					zk := zu[k*D : (k+1)*D]
					zk = zk[:len(ok)]
					for j := range ok {
						ok[j] += w * zk[j]
					}
				}
			}
		}
	})
	return a.out
}

// backward takes dL/dout for the last forward, adds the gradients of the
// attention vectors and returns dL/dz, owned by the layer.
//
// With g_v = dL/dout_v: dL/dz_u gets α_vu g_v from every row v holding u;
// dL/dα_vu = g_v . z_u; through the softmax dL/de_vu = α_vu (dL/dα_vu -
// sum_u' α_vu' dL/dα_vu'); through the LeakyReLU to the logit p_vu, which
// is a_dst . z_v + a_src . z_u.
func (a *attention) backward(dout *mat.Dense) *mat.Dense {
	n, H, D := a.adj.N, a.heads, a.dim
	HD := H * D
	rows := a.batches * n
	if r, c := dout.Dims(); r != rows || c != HD {
		panic(fmt.Sprintf("gat: attention backward got %dx%d, want %dx%d", r, c, rows, HD))
	}
	nnz := a.adj.NNZ()
	a.dz = nn.Reuse(a.dz, rows, HD)
	dz := a.dz.RawMatrix()
	for r := 0; r < rows; r++ {
		clear(dz.Data[r*dz.Stride : r*dz.Stride+HD])
	}
	a.dfs = gnn.Grow(a.dfs, rows*H)
	a.dfd = gnn.Grow(a.dfd, rows*H)
	clear(a.dfs)
	clear(a.dfd)
	g := dout.RawMatrix()
	zz := a.z
	a.each(a.batches, func(b int, scratch *[]float64) {
		base := b * n
		for v := 0; v < n; v++ {
			lo, hi := a.adj.Off[v], a.adj.Off[v+1]
			pre := a.pre[(b*nnz+lo)*H : (b*nnz+hi)*H]
			alpha := a.alpha[(b*nnz+lo)*H : (b*nnz+hi)*H]
			gv := g.Data[(base+v)*g.Stride : (base+v)*g.Stride+HD]
			*scratch = gnn.Grow(*scratch, (hi-lo)*H)
			da := *scratch
			for e := lo; e < hi; e++ {
				u := base + a.adj.Src[e]
				zu := zz[u*HD : (u+1)*HD]
				du := dz.Data[u*dz.Stride : u*dz.Stride+HD]
				for k := 0; k < H; k++ {
					w := alpha[(e-lo)*H+k]
					gk := gv[k*D : (k+1)*D]
					zk := zu[k*D : (k+1)*D]
					dk := du[k*D : (k+1)*D]
					zk, dk = zk[:len(gk)], dk[:len(gk)]
					var s float64
					for j, g := range gk {
						s += g * zk[j]
						dk[j] += w * g
					}
					da[(e-lo)*H+k] = s
				}
			}
			for k := 0; k < H; k++ {
				var mean float64
				for i := 0; i < hi-lo; i++ {
					mean += alpha[i*H+k] * da[i*H+k]
				}
				for e := lo; e < hi; e++ {
					i := (e - lo) * H
					de := alpha[i+k] * (da[i+k] - mean)
					if pre[i+k] < 0 {
						de *= leak
					}
					a.dfd[(base+v)*H+k] += de
					a.dfs[(base+a.adj.Src[e])*H+k] += de
				}
			}
		}
	})
	for r := 0; r < rows; r++ {
		zr := zz[r*HD : (r+1)*HD]
		dr := dz.Data[r*dz.Stride : r*dz.Stride+HD]
		for k := 0; k < H; k++ {
			s, d := a.dfs[r*H+k], a.dfd[r*H+k]
			for j := k * D; j < (k+1)*D; j++ {
				dr[j] += s*a.src[j] + d*a.dst[j]
				a.gsrc[j] += s * zr[j]
				a.gdst[j] += d * zr[j]
			}
		}
	}
	return a.dz
}

// each runs f(b) for every batch b, split over up to GOMAXPROCS goroutines
// that it waits for. Batches touch disjoint rows; scratch is private to the
// goroutine running f.
func (a *attention) each(batches int, f func(b int, scratch *[]float64)) {
	workers := min(runtime.GOMAXPROCS(0), batches)
	if workers < 1 {
		return
	}
	if len(a.scratch) < workers {
		a.scratch = make([][]float64, workers)
	}
	if workers == 1 {
		for b := 0; b < batches; b++ {
			f(b, &a.scratch[0])
		}
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := w; b < batches; b += workers {
				f(b, &a.scratch[w])
			}
		}()
	}
	wg.Wait()
}
