package deepis

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
)

// State blob (little-endian):
//
//	magic "SWDEEPIS", version uint32
//	graph fingerprint: uint32 length + bytes; node count uint32
//	hops, steps, hidden, layers uint32; p float64 bits
//	gate uint32 (0 or 1; from version 2)
//	the parameters as an nn.WriteParams stream (checksummed)
//
// and nothing after it.
const (
	stateMagic   = "SWDEEPIS"
	stateVersion = 2
)

func encodeState(g *graph.Graph, nt *net) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(stateMagic)
	le := binary.LittleEndian
	u32 := func(v int) { b.Write(le.AppendUint32(nil, uint32(v))) }
	u32(stateVersion)
	fp := g.Fingerprint()
	u32(len(fp))
	b.WriteString(fp)
	u32(g.N())
	u32(nt.Hops)
	u32(nt.Steps)
	u32(nt.Hidden)
	u32(nt.Layers)
	b.Write(le.AppendUint64(nil, math.Float64bits(nt.P)))
	gate := 0
	if nt.Gate {
		gate = 1
	}
	u32(gate)
	if err := nn.WriteParams(&b, nt.params); err != nil {
		return nil, fmt.Errorf("deepis: encode state: %w", err)
	}
	return b.Bytes(), nil
}

func badState(format string, args ...any) error {
	return fmt.Errorf("deepis: %w: "+format, append([]any{forward.ErrBadState}, args...)...)
}

// decodeState checks state against g and cfg's explicitly given
// parameters, sets cfg's architecture from the state, and returns the net.
func decodeState(g *graph.Graph, cfg *config, state []byte) (*net, error) {
	r := bytes.NewReader(state)
	var truncated bool
	read := func(n int) []byte {
		if truncated || r.Len() < n {
			truncated = true
			return make([]byte, n)
		}
		b := make([]byte, n)
		r.Read(b)
		return b
	}
	u32 := func() int { return int(binary.LittleEndian.Uint32(read(4))) }
	magic := read(len(stateMagic))
	if truncated {
		return nil, badState("state of %d bytes is truncated", len(state))
	}
	if string(magic) != stateMagic {
		return nil, badState("not a deepis state (magic %q)", magic)
	}
	version := u32()
	if !truncated && (version < 1 || version > stateVersion) {
		return nil, badState("state version %d, this build reads 1 to %d", version, stateVersion)
	}
	fpLen := u32()
	if fpLen > 1024 {
		return nil, badState("fingerprint length %d", fpLen)
	}
	fp := string(read(fpLen))
	n := u32()
	var a arch
	a.Hops, a.Steps, a.Hidden, a.Layers = u32(), u32(), u32(), u32()
	a.P = math.Float64frombits(binary.LittleEndian.Uint64(read(8)))
	if version >= 2 { // version 1 predates the source gate
		switch gate := u32(); {
		case truncated:
		case gate > 1:
			return nil, badState("gate flag %d", gate)
		default:
			a.Gate = gate == 1
		}
	}
	if truncated {
		return nil, badState("state header is truncated")
	}
	if fp != g.Fingerprint() {
		return nil, badState("state was trained on graph %s, this graph is %s", short(fp), short(g.Fingerprint()))
	}
	if n != g.N() {
		return nil, badState("state has %d nodes, graph has %d", n, g.N())
	}
	if a.Hops > 16 || a.Steps > 64 || a.Hidden < 1 || a.Hidden > 4096 || a.Layers > 8 || !(a.P > 0 && a.P <= 1) {
		return nil, badState("implausible architecture %+v", a)
	}
	for _, c := range []struct {
		name       string
		state, cfg any
	}{
		{"hops", a.Hops, cfg.Hops}, {"steps", a.Steps, cfg.Steps}, {"hidden", a.Hidden, cfg.Hidden},
		{"layers", a.Layers, cfg.Layers}, {"p", a.P, cfg.P},
	} {
		if cfg.given[c.name] && c.state != c.cfg && !(c.name == "p" && cfg.autoP) {
			return nil, badState("state was trained with %s=%v, params say %v", c.name, c.state, c.cfg)
		}
	}
	if cfg.gate != gateAuto && a.Gate != (cfg.gate == gateOn) {
		return nil, badState("state was trained with gate=%s, params say %s", onOff(a.Gate), cfg.gate)
	}
	// The header alone sizes the network (hidden 4096 and 8 layers is
	// 1.8 GB with its gradients): a state too short to hold its values
	// is refused before it is built.
	if need := 8 * paramFloats(a); r.Len() < need {
		return nil, badState("%d bytes of parameters for an architecture (%+v) whose values take %d", r.Len(), a, need)
	}
	cfg.arch = a
	nt := newNet(g, a, rand.New(rand.NewPCG(1, 0)))
	if err := nn.ReadParams(r, nt.params); err != nil {
		if errors.Is(err, nn.ErrCorruptParams) || errors.Is(err, nn.ErrParamMismatch) {
			return nil, fmt.Errorf("deepis: %w: %w", forward.ErrBadState, err)
		}
		return nil, fmt.Errorf("deepis: read state: %w", err)
	}
	if r.Len() != 0 {
		return nil, badState("%d unexpected bytes after the parameters", r.Len())
	}
	return nt, nil
}

func onOff(b bool) string {
	if b {
		return gateOn
	}
	return gateOff
}

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// paramFloats is how many values newNet's parameters hold for a: the
// MLP's weights and biases, the edge scale and the source gate.
func paramFloats(a arch) int {
	sizes := a.layerSizes()
	n := 1 // edge.logscale
	for i := 0; i+1 < len(sizes); i++ {
		n += sizes[i]*sizes[i+1] + sizes[i+1]
	}
	if a.Gate {
		n++ // source.logit
	}
	return n
}
