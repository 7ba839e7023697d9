package forward_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
)

// A binary renamed into the plugin's place between the host's check and
// its exec must not run: the checksum pins what is executed. Here another
// program swaps the pinned build and a script back and forth as fast as it
// can while the host launches; the script leaves a mark when it runs. By
// path (go-plugin's SecureConfig hashes the path, then starts the path),
// as before, the script ran 11 and 18 times in two runs of this test,
// against 23 and 25 launches of the pinned build.
func TestLaunchRunsTheBinaryItHashed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the host executes the binary it hashed on Linux only")
	}
	good := forwardtest.Build(t, "icmf")
	sum, err := forward.FileSHA256(good)
	require.NoError(t, err)
	dir := t.TempDir()
	mark := filepath.Join(dir, "evil-ran")
	evil := filepath.Join(dir, "evil")
	require.NoError(t, os.WriteFile(evil, []byte("#!/bin/sh\necho ran >> "+mark+"\nexit 1\n"), 0o755))
	goodCopy := filepath.Join(dir, "good")
	data, err := os.ReadFile(good)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(goodCopy, data, 0o755))
	path := filepath.Join(dir, forward.BinaryPrefix+"icmf")
	require.NoError(t, os.Link(goodCopy, path))

	// The swapper is a process of its own (this test binary again), so it
	// runs beside the host as another user's program would.
	swapper := exec.Command(os.Args[0])
	swapper.Env = append(os.Environ(), swapperEnv+"="+goodCopy+"|"+evil+"|"+path)
	require.NoError(t, swapper.Start())
	t.Cleanup(func() { _ = swapper.Process.Kill(); _ = swapper.Wait() })
	ran, refused := 0, 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		p, err := forward.Launch(t.Context(), path, forward.WithChecksum(sum))
		if err == nil {
			ran++
			require.NoError(t, p.Close())
		} else {
			refused++
		}
	}
	require.NoError(t, swapper.Process.Kill())
	_ = swapper.Wait()
	out, err := os.ReadFile(mark)
	if err == nil {
		t.Fatalf("the unpinned script ran %d times; %d pinned launches worked, %d refused", strings.Count(string(out), "ran"), ran, refused)
	}
	require.ErrorIs(t, err, os.ErrNotExist)
	t.Logf("%d pinned launches worked, %d refused; the script never ran", ran, refused)
}

// swapperEnv makes the test binary swap good and evil into target by
// rename until it is killed: "good|evil|target".
const swapperEnv = "SOURCEWATCH_TEST_SWAPPER"

func swapForever(spec string) {
	files := strings.Split(spec, "|")
	good, evil, target := files[0], files[1], files[2]
	tmp := target + ".tmp"
	for {
		for _, src := range []string{evil, good} {
			_ = os.Remove(tmp)
			if err := os.Link(src, tmp); err != nil {
				panic(err)
			}
			if err := os.Rename(tmp, target); err != nil {
				panic(err)
			}
		}
	}
}
