package forwardtest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

type build struct {
	once sync.Once
	path string
	err  error
}

var (
	mu     sync.Mutex
	builds = map[string]*build{}
	binDir string
)

// Build compiles a plugin once per test binary and returns the path of the
// executable, named sourcewatch-forward-<base> so forward.PluginPath finds
// it in filepath.Dir of the result. name is either a shipped plugin's name
// ("icmf" builds ./cmd/sourcewatch-forward-icmf) or a package path relative
// to the module root ("./forward/internal/testplugins/nan"). A failed build
// fails t.
func Build(t testing.TB, name string) string {
	t.Helper()
	mu.Lock()
	b, ok := builds[name]
	if !ok {
		b = &build{}
		builds[name] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = compile(name) })
	if b.err != nil {
		t.Fatalf("forwardtest: building plugin %q: %v", name, b.err)
	}
	return b.path
}

func compile(name string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	root := filepath.Dir(gomod)
	pkg, base := "./cmd/"+forward.BinaryPrefix+name, name
	if strings.Contains(name, "/") {
		pkg, base = name, path.Base(name)
	}
	mu.Lock()
	if binDir == "" {
		binDir, err = os.MkdirTemp("", "sourcewatch-plugins-")
	}
	dir := binDir
	mu.Unlock()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, forward.BinaryPrefix+base)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return bin, nil
}

// Main runs the tests and then removes the binaries Build made; call it
// from TestMain: func TestMain(m *testing.M) { forwardtest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	mu.Unlock()
	os.Exit(code)
}

// CheckVJP fails t unless m's VJP matches central finite differences of its
// Predict (see forward.CheckVJP) on g, which m must be configured with. It
// works the same on an in-process model and on a *forward.Process.
func CheckVJP(t testing.TB, m forward.Model, g *graph.Graph, opts ...forward.VJPCheckOptions) forward.VJPCheck {
	t.Helper()
	var o forward.VJPCheckOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	res, err := forward.CheckVJP(t.Context(), m, g.N(), rand.New(rand.NewPCG(1, 2)), o)
	if err != nil {
		t.Fatalf("forwardtest: vjp check: %v", err)
	}
	if !res.Pass() {
		t.Fatalf("forwardtest: vjp check failed: %s", res)
	}
	return res
}

// CheckSameVJP fails t unless a and b, the same model two ways (through a
// plugin process and in process, say), return bit-identical y and dx for
// one random batch of three rows over n nodes.
func CheckSameVJP(t testing.TB, a, b forward.Model, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	x, dy := mat.NewDense(3, n, nil), mat.NewDense(3, n, nil)
	for i, raw := 0, x.RawMatrix().Data; i < len(raw); i++ {
		raw[i] = rng.Float64()
	}
	for i, raw := 0, dy.RawMatrix().Data; i < len(raw); i++ {
		raw[i] = 2*rng.Float64() - 1
	}
	ya, dxa, err := a.VJP(t.Context(), x, dy)
	if err != nil {
		t.Fatalf("forwardtest: first model's vjp: %v", err)
	}
	yb, dxb, err := b.VJP(t.Context(), x, dy)
	if err != nil {
		t.Fatalf("forwardtest: second model's vjp: %v", err)
	}
	for _, c := range []struct {
		name string
		a, b []float64
	}{{"y", ya.RawMatrix().Data, yb.RawMatrix().Data}, {"dx", dxa.RawMatrix().Data, dxb.RawMatrix().Data}} {
		if len(c.a) != len(c.b) {
			t.Fatalf("forwardtest: %s has %d values against %d", c.name, len(c.a), len(c.b))
		}
		for i := range c.a {
			if c.a[i] != c.b[i] {
				t.Fatalf("forwardtest: %s differs at row %d node %d: %v against %v", c.name, i/n, i%n, c.a[i], c.b[i])
			}
		}
	}
}

// BenchmarkVJP runs two sub-benchmarks, <graph>/inprocess and
// <graph>/process, each timing one VJP of (x, dy) by the model in process
// and by the same model through its plugin process: the difference is
// the cost of a round trip.
func BenchmarkVJP(b *testing.B, graphName string, in, proc forward.Model, x, dy *mat.Dense) {
	for _, m := range []struct {
		name  string
		model forward.Model
	}{{"inprocess", in}, {"process", proc}} {
		b.Run(graphName+"/"+m.name, func(b *testing.B) {
			for b.Loop() {
				if _, _, err := m.model.VJP(b.Context(), x, dy); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
