fn main() {
    tonic_prost_build::configure()
        .build_client(false)
        .compile_protos(&["proto/grpc_testing.proto"], &["proto"])
        .expect("compiling proto/grpc_testing.proto (needs protoc on PATH or PROTOC set)");
}
