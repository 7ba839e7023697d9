//go:build tools

// This file pins the module's dependencies while the packages that use them
// are being written; it is removed once every dependency has a real import.
package sourcewatch

import (
	_ "github.com/hashicorp/go-plugin"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/nats-io/nats.go/micro"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
	_ "github.com/stretchr/testify/require"
	_ "go.uber.org/zap"
	_ "golang.org/x/term"
	_ "gonum.org/v1/gonum/blas/blas64"
	_ "gonum.org/v1/gonum/mat"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
)
