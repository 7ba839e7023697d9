package gnn

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
)

// maxHeader bounds the JSON header of a state blob.
const maxHeader = 1 << 16

// stateHeader is the JSON header of a state blob, followed by the
// parameters in nn.WriteParams format.
type stateHeader[A any] struct {
	Model       string `json:"model"`
	Version     int    `json:"version"`
	Fingerprint string `json:"fingerprint"`
	Nodes       int    `json:"nodes"`
	Arch        A      `json:"arch"`
}

// StateMagic opens every state blob of the model: "sourcewatch-forward-"
// followed by its name and a newline.
func (s *Spec[A, N]) StateMagic() string { return "sourcewatch-forward-" + s.Name + "\n" }

// EncodeState serialises net for graph g:
// magic | uint32 LE header length | header JSON | parameters.
func (s *Spec[A, N]) EncodeState(net N, g *graph.Graph) ([]byte, error) {
	h, err := json.Marshal(stateHeader[A]{Model: s.Name, Version: s.StateVersion, Fingerprint: g.Fingerprint(), Nodes: g.N(), Arch: net.Arch()})
	if err != nil {
		return nil, fmt.Errorf("encode state header: %w", err)
	}
	var buf bytes.Buffer
	buf.WriteString(s.StateMagic())
	buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(h))))
	buf.Write(h)
	if err := nn.WriteParams(&buf, net.Params()); err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeState rebuilds the network a state blob describes, for g. Every
// failure wraps forward.ErrBadState.
func (s *Spec[A, N]) DecodeState(state []byte, g *graph.Graph) (N, error) {
	var none N
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{forward.ErrBadState}, args...)...)
	}
	magic := s.StateMagic()
	if !bytes.HasPrefix(state, []byte(magic)) {
		return none, bad("not a %s state (missing magic)", s.Name)
	}
	rest := state[len(magic):]
	if len(rest) < 4 {
		return none, bad("truncated header")
	}
	hl := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if hl > maxHeader || int(hl) > len(rest) {
		return none, bad("header length %d out of range", hl)
	}
	var h stateHeader[A]
	if err := json.Unmarshal(rest[:hl], &h); err != nil {
		return none, bad("header: %v", err)
	}
	switch {
	case h.Model != s.Name:
		return none, bad("state of model %q, want %q", h.Model, s.Name)
	case h.Version != s.StateVersion:
		return none, bad("state version %d, this build reads %d", h.Version, s.StateVersion)
	case h.Fingerprint != g.Fingerprint() || h.Nodes != g.N():
		return none, bad("state made for graph %s (%d nodes), configured graph is %s (%d nodes)",
			h.Fingerprint, h.Nodes, g.Fingerprint(), g.N())
	}
	if err := h.Arch.Validate(); err != nil {
		return none, bad("architecture: %v", err)
	}
	net := s.NewNetwork(g, h.Arch, 0)
	pr := bytes.NewReader(rest[hl:])
	if err := nn.ReadParams(pr, net.Params()); err != nil {
		return none, fmt.Errorf("%w: %w", forward.ErrBadState, err)
	}
	// ReadParams reads only its own stream; whatever follows is not a
	// state this package wrote.
	if pr.Len() != 0 {
		return none, bad("%d bytes after the parameters", pr.Len())
	}
	return net, nil
}
