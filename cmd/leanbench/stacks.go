package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/leangrpc/leangrpc"
)

// impl is one gRPC implementation: how to make its server and its client.
type impl struct {
	name      string
	newServer func() grpcServer
	// dial returns a client connection for addr ("host:port") and the
	// function that closes it.
	dial func(addr string) (grpc.ClientConnInterface, func() error, error)
}

// grpcServer is what both grpc.Server and leangrpc.Server provide.
type grpcServer interface {
	grpc.ServiceRegistrar
	Serve(net.Listener) error
	Stop()
}

var impls = map[string]*impl{
	"leangrpc": {
		name:      "leangrpc",
		newServer: func() grpcServer { return leangrpc.NewServer() },
		dial: func(addr string) (grpc.ClientConnInterface, func() error, error) {
			cc, err := leangrpc.NewClient(addr)
			if err != nil {
				return nil, nil, err
			}
			return cc, cc.Close, nil
		},
	},
	// leangrpc with pooled reads switched off on both sides (one read
	// buffer per connection for its life), to measure what pooling costs.
	stackLeanNoPool: {
		name:      stackLeanNoPool,
		newServer: func() grpcServer { return leangrpc.NewServer(leangrpc.ReadBufferPooling(false)) },
		dial: func(addr string) (grpc.ClientConnInterface, func() error, error) {
			cc, err := leangrpc.NewClient(addr, leangrpc.WithReadBufferPooling(false))
			if err != nil {
				return nil, nil, err
			}
			return cc, cc.Close, nil
		},
	},
	"grpc-go": {
		name:      "grpc-go",
		newServer: func() grpcServer { return grpc.NewServer() },
		dial: func(addr string) (grpc.ClientConnInterface, func() error, error) {
			cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, nil, err
			}
			return cc, cc.Close, nil
		},
	},
}

// stack is a client implementation talking to a server implementation.
// Its name is the implementation's name when both sides are the same, and
// "client>server" otherwise.
type stack struct {
	name           string
	client, server *impl
}

const (
	stackLean = "leangrpc"
	stackGrpc = "grpc-go"
	// stackLeanNoPool is leangrpc with pooled reads off; it only runs when
	// named in -stacks (not part of "all").
	stackLeanNoPool = "leangrpc-nopool"
	allStacks       = "leangrpc,grpc-go,leangrpc>grpc-go,grpc-go>leangrpc"
	fileSuffix      = "_to_" // replaces ">" in profile file names
)

func parseStacks(list string) ([]stack, error) {
	if list == "all" {
		list = allStacks
	}
	var out []stack
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		c, s, mixed := strings.Cut(name, ">")
		if !mixed {
			s = c
		}
		ci, cok := impls[c]
		si, sok := impls[s]
		if !cok || !sok {
			return nil, fmt.Errorf("unknown stack %q (want leangrpc, grpc-go, leangrpc>grpc-go, grpc-go>leangrpc, leangrpc-nopool or all)", name)
		}
		if c == s {
			name = c
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, stack{name: name, client: ci, server: si})
	}
	if len(out) == 0 {
		return nil, errors.New("no stacks")
	}
	return out, nil
}

// runningServer is a server listening on loopback.
type runningServer struct {
	addr  string
	stop  func() error
	errCh chan error // receives Serve's result
}

// startServer starts a BenchmarkService server of implementation im on a
// loopback port. A Serve that fails at once is reported as an error.
func startServer(im *impl) (*runningServer, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv, err := newServerSafe(im)
	if err != nil {
		lis.Close()
		return nil, err
	}
	errCh := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				errCh <- fmt.Errorf("%s: Serve panicked: %v", im.name, r)
			}
		}()
		errCh <- srv.Serve(lis)
	}()
	select {
	case err := <-errCh:
		lis.Close()
		if err == nil {
			err = errors.New("Serve returned at once")
		}
		return nil, fmt.Errorf("%s server: %w", im.name, err)
	case <-time.After(30 * time.Millisecond):
	}
	rs := &runningServer{addr: lis.Addr().String(), errCh: errCh}
	rs.stop = func() error {
		defer lis.Close()
		if !within(5*time.Second, srv.Stop) {
			return fmt.Errorf("%s server: Stop did not return within 5s", im.name)
		}
		return nil
	}
	return rs, nil
}

func newServerSafe(im *impl) (srv grpcServer, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: server setup panicked: %v", im.name, r)
		}
	}()
	srv = im.newServer()
	testpb.RegisterBenchmarkServiceServer(srv, benchService{})
	return srv, nil
}

// dialSafe dials addr with im, turning a panic into an error.
func dialSafe(im *impl, addr string) (cc grpc.ClientConnInterface, closeFn func() error, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: dial panicked: %v", im.name, r)
		}
	}()
	cc, closeFn, err = im.dial(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s client: %w", im.name, err)
	}
	return cc, closeFn, nil
}

// within runs f and reports whether it returned within d. If it did not,
// f keeps running in the background.
func within(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { recover() }()
		f()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
