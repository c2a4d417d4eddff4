package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"google.golang.org/grpc"
)

// The raw stack is the floor under every gRPC stack: the same workloads
// as plain length-prefixed messages over TCP, with no HTTP/2, no
// protobuf, no headers and no flow control. It is not a gRPC stack and
// does nothing a gRPC stack must; it measures what the machine and the
// kernel cost for the bytes the workload moves, so that a table shows how
// far each stack is from it.
//
// Each call in flight (each unary caller, each stream) has a TCP
// connection of its own: raw has no way to multiplex, and a connection
// per caller is the cheapest way to move its messages. A request is an
// 8-byte header, the request's length and the response's length (32 bits
// each, big-endian), then the request's bytes; the server answers with
// the response's length (32 bits) and that many zero bytes. A unary call
// and a streaming ping-pong are therefore the same exchange on the wire.
// -connections, -compression and -backends do not apply to it; under -tls
// each connection runs the same TLS handshake as the gRPC stacks.

const stackRaw = "raw"

// rawMaxMessage bounds the lengths a raw server accepts, so that a stray
// connection cannot make it allocate without limit.
const rawMaxMessage = 64 << 20

// rawServer serves the raw protocol. It satisfies grpcServer so that the
// harness starts and stops it as it does the gRPC servers; it registers
// no services.
type rawServer struct {
	sec *benchTLS

	mu    sync.Mutex
	lis   net.Listener
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

func newRawServer(sec *benchTLS) grpcServer {
	return &rawServer{sec: sec, conns: make(map[net.Conn]struct{})}
}

func (s *rawServer) RegisterService(*grpc.ServiceDesc, any) {}

func (s *rawServer) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return errors.New("raw server stopped")
	}
	s.lis = lis
	s.mu.Unlock()
	for {
		c, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			done := s.done
			s.mu.Unlock()
			if done {
				return nil
			}
			return err
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// serveConn answers requests on c until it closes. Its buffers grow to
// the largest message and are reused.
func (s *rawServer) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	if creds := s.sec.serverCreds(); creds != nil {
		sc, _, err := creds.ServerHandshake(c)
		if err != nil {
			return
		}
		c = sc
	}
	var hdr [8]byte
	var req, resp []byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		reqLen, respLen := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
		if reqLen > rawMaxMessage || respLen > rawMaxMessage {
			return
		}
		if cap(req) < int(reqLen) {
			req = make([]byte, reqLen)
		}
		if _, err := io.ReadFull(c, req[:reqLen]); err != nil {
			return
		}
		if cap(resp) < 4+int(respLen) {
			resp = make([]byte, 4+respLen)
		}
		resp = resp[:4+respLen]
		binary.BigEndian.PutUint32(resp, respLen)
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

func (s *rawServer) Stop() {
	s.mu.Lock()
	s.done = true
	if s.lis != nil {
		s.lis.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// rawCaller is one raw call in flight: a connection, the request it sends
// (header and bytes, built once) and the buffer it reads responses into.
type rawCaller struct {
	c    net.Conn
	req  []byte
	resp []byte
}

// dialRaw opens a caller's connection to addr.
func dialRaw(ctx context.Context, addr string, sec *benchTLS, cfg config) (*rawCaller, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if creds := sec.clientCreds(); creds != nil {
		host, _, _ := net.SplitHostPort(addr)
		sc, _, err := creds.ClientHandshake(ctx, host, c)
		if err != nil {
			c.Close()
			return nil, err
		}
		c = sc
	}
	req := make([]byte, 8+cfg.reqSize)
	binary.BigEndian.PutUint32(req, uint32(cfg.reqSize))
	binary.BigEndian.PutUint32(req[4:], uint32(cfg.respSize))
	return &rawCaller{c: c, req: req, resp: make([]byte, 4+cfg.respSize)}, nil
}

// op sends the request and reads the whole response.
func (r *rawCaller) op() error {
	if _, err := r.c.Write(r.req); err != nil {
		return fmt.Errorf("raw write: %w", err)
	}
	if _, err := io.ReadFull(r.c, r.resp[:4]); err != nil {
		return fmt.Errorf("raw read: %w", err)
	}
	n := binary.BigEndian.Uint32(r.resp[:4])
	if int(n) != len(r.resp)-4 {
		return fmt.Errorf("raw read: response of %d bytes, want %d", n, len(r.resp)-4)
	}
	if _, err := io.ReadFull(r.c, r.resp[4:]); err != nil {
		return fmt.Errorf("raw read: %w", err)
	}
	return nil
}

func (r *rawCaller) close() error { return r.c.Close() }
