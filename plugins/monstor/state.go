package monstor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
)

// stateMagic opens every state blob; stateVersion is bumped whenever the
// layout or the meaning of a parameter changes.
const (
	stateMagic   = "sourcewatch-forward-monstor\n"
	stateVersion = 2 // 2: root weights
	maxHeader    = 1 << 16
)

// stateHeader is the JSON header of a state blob, followed by the
// parameters in nn.WriteParams format.
type stateHeader struct {
	Model       string `json:"model"`
	Version     int    `json:"version"`
	Fingerprint string `json:"fingerprint"`
	Nodes       int    `json:"nodes"`
	Arch        Arch   `json:"arch"`
}

// encodeState serialises net for graph g:
// magic | uint32 LE header length | header JSON | parameters.
func encodeState(net *network, g *graph.Graph) ([]byte, error) {
	h, err := json.Marshal(stateHeader{Model: Name, Version: stateVersion, Fingerprint: g.Fingerprint(), Nodes: g.N(), Arch: net.arch})
	if err != nil {
		return nil, fmt.Errorf("encode state header: %w", err)
	}
	var buf bytes.Buffer
	buf.WriteString(stateMagic)
	buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(h))))
	buf.Write(h)
	if err := nn.WriteParams(&buf, net.params); err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return buf.Bytes(), nil
}

// decodeState rebuilds the network a state blob describes, for g. Every
// failure wraps forward.ErrBadState.
func decodeState(state []byte, g *graph.Graph) (*network, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{forward.ErrBadState}, args...)...)
	}
	if !bytes.HasPrefix(state, []byte(stateMagic)) {
		return nil, bad("not a monstor state (missing magic)")
	}
	rest := state[len(stateMagic):]
	if len(rest) < 4 {
		return nil, bad("truncated header")
	}
	hl := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if hl > maxHeader || int(hl) > len(rest) {
		return nil, bad("header length %d out of range", hl)
	}
	var h stateHeader
	if err := json.Unmarshal(rest[:hl], &h); err != nil {
		return nil, bad("header: %v", err)
	}
	switch {
	case h.Model != Name:
		return nil, bad("state of model %q, want %q", h.Model, Name)
	case h.Version != stateVersion:
		return nil, bad("state version %d, this build reads %d", h.Version, stateVersion)
	case h.Fingerprint != g.Fingerprint() || h.Nodes != g.N():
		return nil, bad("state made for graph %s (%d nodes), configured graph is %s (%d nodes)",
			h.Fingerprint, h.Nodes, g.Fingerprint(), g.N())
	}
	if err := h.Arch.Validate(); err != nil {
		return nil, bad("architecture: %v", err)
	}
	net := newNetwork(g, h.Arch, 0)
	if err := nn.ReadParams(bytes.NewReader(rest[hl:]), net.params); err != nil {
		return nil, fmt.Errorf("%w: %w", forward.ErrBadState, err)
	}
	return net, nil
}
