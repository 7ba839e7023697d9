package localize

import (
	"encoding/json"
	"testing"
)

// bundleEntries are the entries FuzzBundleEntry replaces, by index.
var bundleEntries = []string{entryGraph, entryVAE, entryTerms, entryForward}

// withChecksummedEntry returns good with entry name's body replaced, the manifest's
// checksum updated to match, so the body reaches its decoder.
func withChecksummedEntry(t testing.TB, good []byte, name string, body []byte) []byte {
	return rewrite(t, good, func(n string, old []byte) []byte {
		switch n {
		case name:
			return body
		case entryManifest:
			var m map[string]any
			if err := json.Unmarshal(old, &m); err != nil {
				t.Fatal(err)
			}
			m["checksums"].(map[string]any)[name] = sha256Hex(body)
			out, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		return old
	})
}

// FuzzBundleEntry feeds one entry of a bundle (graph, prior, terms,
// forward state) to ReadBundle, checksummed as the manifest says, and
// solves with what loads: its parts must agree, or it is refused.
func FuzzBundleEntry(f *testing.F) {
	good := encodeBundle(f, testBundle(f))
	raw := map[string][]byte{}
	rewrite(f, good, func(name string, body []byte) []byte { raw[name] = body; return body })
	for i, name := range bundleEntries {
		body := raw[name]
		f.Add(uint8(i), body)
		f.Add(uint8(i), body[:len(body)/2])
		f.Add(uint8(i), []byte{})
	}
	p, fwd, _ := testProblem(12, 2, 4)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		name := bundleEntries[int(which)%len(bundleEntries)]
		got, err := readBytes(withChecksummedEntry(t, good, name, body))
		if err != nil {
			return
		}
		if got.Graph.N() != len(p.Y) {
			// Another graph that agrees with the manifest cannot be
			// made by changing the edge file alone.
			t.Fatalf("a %d-node graph loaded for the %d-node manifest", got.Graph.N(), len(p.Y))
		}
		opts := got.Options()
		opts.Restarts, opts.InitSteps, opts.OptSteps = 1, 2, 2
		if _, err := Solve(t.Context(), got, fwd, p.Y, opts); err != nil {
			return
		}
	})
}

// FuzzBundleArchive reads arbitrary bytes as a bundle archive: refused
// with ErrBadBundle-family errors, never a panic or an unbounded read.
func FuzzBundleArchive(f *testing.F) {
	good := encodeBundle(f, testBundle(f))
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(good[len(good)/2:])
	f.Add([]byte("PK\x05\x06" + string(make([]byte, 18))))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = readBytes(data)
	})
}
