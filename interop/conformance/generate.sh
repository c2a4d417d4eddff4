#!/usr/bin/env bash
# Regenerates internal/conformancev1 from the conformance suite's .proto
# files, read from the Go module cache at the version go.mod requires (they
# are not copied into this repository). The files name no go_package, so
# M options map each into this module's package. protoc-gen-go and
# protoc-gen-go-grpc are this module's tools (go.mod's tool block), built
# at the versions go.mod pins. Only the files the server under test needs
# are generated: config, server_compat and service.
set -euo pipefail
cd "$(dirname "$0")"

PROTOC=${PROTOC:-/usr/bin/protoc}
MOD=github.com/leangrpc/leangrpc/interop/conformance
PKG=$MOD/internal/conformancev1

go mod download connectrpc.com/conformance
SRC=$(go list -m -f '{{.Dir}}' connectrpc.com/conformance)/proto

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

protos=()
opts="module=$MOD"
for f in config server_compat service; do
  protos+=("connectrpc/conformance/v1/$f.proto")
  opts="$opts,Mconnectrpc/conformance/v1/$f.proto=$PKG"
done

rm -f internal/conformancev1/*.pb.go
"$PROTOC" -I "$SRC" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out=. --go_opt="$opts" \
  --go-grpc_out=. --go-grpc_opt="$opts" \
  "${protos[@]}"
