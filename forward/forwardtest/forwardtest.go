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
