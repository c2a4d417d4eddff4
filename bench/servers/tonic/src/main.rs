//! A minimal tonic server of grpc.testing.TestService, the Rust reference in
//! leangrpc's server benchmark (bench/servers). It serves EmptyCall,
//! UnaryCall and FullDuplexCall with the semantics of grpc-go's interop test
//! server (interop.NewTestServer) for the fields the benchmark uses, on a
//! tokio runtime with two worker threads and tonic's default HTTP/2 settings.
//!
//! Flags: `-port N` (0 picks a free port; the chosen address is printed on
//! stderr as "listening on ADDR", as leangrpc's interop server does) and
//! `-host H` (127.0.0.1 by default). SIGINT or SIGTERM stops it.

use std::net::SocketAddr;
use std::pin::Pin;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request, Response, Status, Streaming};

pub mod pb {
    tonic::include_proto!("grpc.testing");
}

use pb::test_service_server::{TestService, TestServiceServer};
use pb::{
    Empty, EchoStatus, Payload, SimpleRequest, SimpleResponse, StreamingOutputCallRequest,
    StreamingOutputCallResponse,
};

/// The largest payload a request may ask for, so that a bad request cannot
/// make the server allocate without bound.
const MAX_PAYLOAD: i32 = 4 << 20;

fn payload(size: i32) -> Result<Option<Payload>, Status> {
    if !(0..=MAX_PAYLOAD).contains(&size) {
        return Err(Status::invalid_argument(format!(
            "requested a payload of {size} bytes"
        )));
    }
    Ok(Some(Payload {
        r#type: 0,
        body: vec![0u8; size as usize],
    }))
}

/// The status a request asked to be echoed, as grpc-go's interop server
/// does; None when it asks for OK.
fn echo_status(s: &Option<EchoStatus>) -> Option<Status> {
    match s {
        Some(s) if s.code != 0 => Some(Status::new(Code::from_i32(s.code), s.message.clone())),
        _ => None,
    }
}

#[derive(Default)]
struct Service;

type DuplexStream =
    Pin<Box<dyn Stream<Item = Result<StreamingOutputCallResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl TestService for Service {
    async fn empty_call(&self, _req: Request<Empty>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }

    async fn unary_call(
        &self,
        req: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        let req = req.into_inner();
        if let Some(st) = echo_status(&req.response_status) {
            return Err(st);
        }
        Ok(Response::new(SimpleResponse {
            payload: payload(req.response_size)?,
            ..Default::default()
        }))
    }

    type FullDuplexCallStream = DuplexStream;

    /// Answers each request with one response per ResponseParameters entry,
    /// in order, until the client half-closes.
    async fn full_duplex_call(
        &self,
        req: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Self::FullDuplexCallStream>, Status> {
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            while let Some(msg) = inbound.next().await {
                let msg = match msg {
                    Ok(m) => m,
                    Err(st) => {
                        let _ = tx.send(Err(st)).await;
                        return;
                    }
                };
                if let Some(st) = echo_status(&msg.response_status) {
                    let _ = tx.send(Err(st)).await;
                    return;
                }
                for p in &msg.response_parameters {
                    let out = payload(p.size).map(|payload| StreamingOutputCallResponse { payload });
                    let failed = out.is_err();
                    if tx.send(out).await.is_err() || failed {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

fn parse_args() -> Result<SocketAddr, String> {
    let mut host = String::from("127.0.0.1");
    let mut port = String::from("10000");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let a = a.trim_start_matches('-').to_string();
        let (name, value) = match a.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => {
                let v = args.next().ok_or(format!("flag -{a} needs a value"))?;
                (a, v)
            }
        };
        match name.as_str() {
            "host" => host = value,
            "port" => port = value,
            _ => return Err(format!("unknown flag -{name}; flags: -host H, -port N")),
        }
    }
    format!("{host}:{port}")
        .parse()
        .map_err(|e| format!("address {host}:{port}: {e}"))
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let addr = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tonic-testserver: {e}");
            std::process::exit(2);
        }
    };
    let lis = TcpListener::bind(addr).await.unwrap_or_else(|e| {
        eprintln!("tonic-testserver: listen on {addr}: {e}");
        std::process::exit(1);
    });
    let local = lis.local_addr().expect("local address");
    eprintln!("tonic-testserver: listening on {local}");
    // Nagle's delay would hold back small responses; tonic's own serve()
    // turns it off as well.
    let incoming = TcpIncoming::from(lis).with_nodelay(Some(true));
    let res = tonic::transport::Server::builder()
        .add_service(TestServiceServer::new(Service))
        .serve_with_incoming_shutdown(incoming, shutdown())
        .await;
    if let Err(e) = res {
        eprintln!("tonic-testserver: serve: {e}");
        std::process::exit(1);
    }
}
