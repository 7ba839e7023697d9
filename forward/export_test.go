package forward

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sourcewatch/sourcewatch/forward/forwardpb"
)

// ForgeNextSharedBatch makes p's next fused call through the shared region
// tell the plugin the batch is 64 times as many rows as the host wrote, more
// than the region holds: the plugin cannot map it, as if mapping what the
// host grew had failed, and refuses without touching the region.
func ForgeNextSharedBatch(p *Process) {
	p.rpc = &forgingClient{ForwardClient: p.rpc}
}

type forgingClient struct {
	forwardpb.ForwardClient
	once sync.Once
}

func (c *forgingClient) SquaredErrorVJP(ctx context.Context, in *forwardpb.SquaredErrorVJPRequest, opts ...grpc.CallOption) (*forwardpb.VJPResponse, error) {
	if in.GetShared() != nil {
		c.once.Do(func() {
			in = proto.Clone(in).(*forwardpb.SquaredErrorVJPRequest)
			in.Shared.Rows *= 64
		})
	}
	return c.ForwardClient.SquaredErrorVJP(ctx, in, opts...)
}

// TLSHint is tlsHint, for a test of the texts no test plugin can provoke
// reliably.
var TLSHint = tlsHint

// SharedRetired reports whether p has stopped passing batches through its
// shared region.
func SharedRetired(p *Process) bool { return p.shared != nil && p.shared.retired.Load() }
