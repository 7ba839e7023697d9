#!/bin/sh
# Regenerates forward/forwardpb from forward/proto/sourcewatch/forward/v1/forward.proto.
# Needs only Go and the module proxy (or a warm module cache): buf and the two
# protoc plugins are pinned here and installed into a throwaway GOBIN, so the
# machine needs no protoc. The generated code is committed; run this after
# editing the proto (make proto).
set -eu
cd "$(dirname "$0")"
gobin=$(mktemp -d)
trap 'rm -rf "$gobin"' EXIT
GOFLAGS= GOBIN="$gobin" go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOFLAGS= GOBIN="$gobin" go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
GOFLAGS= GOBIN="$gobin" go install github.com/bufbuild/buf/cmd/buf@v1.75.0
PATH="$gobin:$PATH" "$gobin/buf" generate
