#!/bin/sh
# Regenerates this package's .pb.go files from its .proto sources. The
# generated files are committed, so building and testing need none of this.
#
# Needs python3 with grpcio-tools, which bundles protoc and the
# google/protobuf/*.proto includes (Debian's protoc 3.21 cannot compile
# editions). The files were generated with grpcio-tools 1.85.1, whose
# protoc is libprotoc 35.1:
#   pip install grpcio-tools==1.85.1
# PYTHON names the interpreter that has it (python3 by default):
#   PYTHON=/path/to/venv/bin/python go generate ./internal/protoalias/testmsg
# protoc-gen-go is built at the version go.mod requires, so that the
# generated code matches the runtime it is compiled against.
set -eu
cd "$(dirname "$0")"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
PATH="$bin:$PATH" "${PYTHON:-python3}" -m grpc_tools.protoc -I. \
	--go_out=. --go_opt=paths=source_relative \
	proto2.proto proto3.proto editions.proto opaque.proto
