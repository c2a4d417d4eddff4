package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/leangrpc/leangrpc"
)

// impl is one gRPC implementation: how to make its server and its client,
// over TLS when sec is not nil.
type impl struct {
	name      string
	newServer func(sec *benchTLS) grpcServer
	// dial returns a client connection for addr ("host:port") and the
	// function that closes it; netDial, when not nil, opens its network
	// connections (the idle client's source addresses, source_addrs.go).
	dial func(addr string, sec *benchTLS, netDial netDialer) (grpc.ClientConnInterface, func() error, error)
	// exe, when set, is another leanbench binary whose children run this
	// implementation (-baseline): another build of leangrpc, known there
	// as childName. newServer and dial are nil then: the implementation
	// never runs in this binary.
	exe       string
	childName string
}

// child returns the binary that runs im's children ("" for this one) and
// the stack name to hand them.
func (im *impl) child() (exe, name string) {
	if im.exe != "" {
		return im.exe, im.childName
	}
	return "", im.name
}

// addBaseline registers the implementation of -baseline: leangrpc as built
// into the leanbench binary at exe, as the stack name.
func addBaseline(name, exe string) error {
	if im, ok := impls[name]; ok && im.exe == "" || strings.ContainsAny(name, ">,") || name == "" || name == "all" {
		return fmt.Errorf("-baseline-name %q: want a new stack name without '>' or ','", name)
	}
	abs, err := filepath.Abs(exe)
	if err != nil {
		return fmt.Errorf("-baseline: %w", err)
	}
	if fi, err := os.Stat(abs); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 && runtime.GOOS != "windows" {
		return fmt.Errorf("-baseline %s: not an executable file", exe)
	}
	impls[name] = &impl{name: name, exe: abs, childName: stackLean}
	return nil
}

// grpcServer is what both grpc.Server and leangrpc.Server provide.
type grpcServer interface {
	grpc.ServiceRegistrar
	Serve(net.Listener) error
	Stop()
}

var impls = map[string]*impl{
	"leangrpc": {
		name: "leangrpc",
		newServer: func(sec *benchTLS) grpcServer {
			return leangrpc.NewServer(leanServerCreds(sec)...)
		},
		dial: func(addr string, sec *benchTLS, netDial netDialer) (grpc.ClientConnInterface, func() error, error) {
			cc, err := leangrpc.NewClient(addr, leanClientOptions(sec, netDial)...)
			if err != nil {
				return nil, nil, err
			}
			return cc, cc.Close, nil
		},
	},
	// leangrpc with pooled reads switched off on both sides (one read
	// buffer per connection for its life), to measure what pooling costs.
	stackLeanNoPool: {
		name: stackLeanNoPool,
		newServer: func(sec *benchTLS) grpcServer {
			return leangrpc.NewServer(append(leanServerCreds(sec), leangrpc.ReadBufferPooling(false))...)
		},
		dial: func(addr string, sec *benchTLS, netDial netDialer) (grpc.ClientConnInterface, func() error, error) {
			cc, err := leangrpc.NewClient(addr, append(leanClientOptions(sec, netDial), leangrpc.WithReadBufferPooling(false))...)
			if err != nil {
				return nil, nil, err
			}
			return cc, cc.Close, nil
		},
	},
	// leangrpc with the receive low-water mark switched off on both sides,
	// to measure what the mark saves.
	stackLeanNoLowWater: {
		name: stackLeanNoLowWater,
		newServer: func(sec *benchTLS) grpcServer {
			return leangrpc.NewServer(append(leanServerCreds(sec), leangrpc.RecvLowWater(false))...)
		},
		dial: func(addr string, sec *benchTLS, netDial netDialer) (grpc.ClientConnInterface, func() error, error) {
			cc, err := leangrpc.NewClient(addr, append(leanClientOptions(sec, netDial), leangrpc.WithRecvLowWater(false))...)
			if err != nil {
				return nil, nil, err
			}
			return cc, cc.Close, nil
		},
	},
	// raw: length-prefixed messages over TCP, the floor (raw.go). It has
	// no gRPC client; its workers dial for themselves.
	stackRaw: {
		name:      stackRaw,
		newServer: newRawServer,
	},
	"grpc-go": {
		name: "grpc-go",
		newServer: func(sec *benchTLS) grpcServer {
			opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(maxBenchMsg)}
			if sec != nil {
				opts = append(opts, grpc.Creds(sec.serverCreds()))
			}
			return grpc.NewServer(opts...)
		},
		dial: func(addr string, sec *benchTLS, netDial netDialer) (grpc.ClientConnInterface, func() error, error) {
			creds := sec.clientCreds()
			if creds == nil {
				creds = insecure.NewCredentials()
			}
			opts := []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxBenchMsg))}
			if netDial != nil {
				opts = append(opts, grpc.WithContextDialer(netDial))
			}
			cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
			if err != nil {
				return nil, nil, err
			}
			return cc, cc.Close, nil
		},
	},
}

// leanServerCreds and leanClientOptions are the options that put a
// leangrpc server or client on sec's TLS; none for plaintext.
// They also raise the receive limit to maxBenchMsg, as the grpc-go stack
// does, and leanClientOptions dials with netDial when it is not nil.
func leanServerCreds(sec *benchTLS) []leangrpc.ServerOption {
	opts := []leangrpc.ServerOption{leangrpc.MaxRecvMsgSize(maxBenchMsg)}
	if sec == nil {
		return opts
	}
	return append(opts, leangrpc.Creds(sec.serverCreds()))
}

func leanClientOptions(sec *benchTLS, netDial netDialer) []leangrpc.DialOption {
	opts := []leangrpc.DialOption{leangrpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxBenchMsg))}
	if netDial != nil {
		opts = append(opts, leangrpc.WithContextDialer(netDial))
	}
	if sec == nil {
		return opts
	}
	return append(opts, leangrpc.WithTransportCredentials(sec.clientCreds()))
}

// maxBenchMsg is every gRPC stack's receive limit, above the default 4 MiB
// so that messages of 16 MB can be measured.
const maxBenchMsg = 64 << 20

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
	// stackLeanNoLowWater is leangrpc with the receive low-water mark off;
	// it only runs when named in -stacks.
	stackLeanNoLowWater = "leangrpc-nolowat"
	allStacks           = "leangrpc,grpc-go,leangrpc>grpc-go,grpc-go>leangrpc"
	fileSuffix          = "_to_" // replaces ">" in profile file names
)

func parseStacks(list string) ([]stack, error) {
	var names []string
	for _, name := range strings.Split(list, ",") {
		if strings.TrimSpace(name) == "all" {
			names = append(names, strings.Split(allStacks, ",")...)
		} else {
			names = append(names, name)
		}
	}
	var out []stack
	seen := map[string]bool{}
	for _, name := range names {
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
			return nil, fmt.Errorf("unknown stack %q (want leangrpc, grpc-go, leangrpc>grpc-go, grpc-go>leangrpc, raw, leangrpc-nopool, leangrpc-nolowat, leangrpc-http, grpc-go-http, leangrpc-connect, connect-go, all, or -baseline's name)", name)
		}
		if mixed && c != s && (ci.exe != "" || si.exe != "") {
			// A throughput run has client and server in one process.
			return nil, fmt.Errorf("stack %q: the baseline runs only against itself", name)
		}
		if c == s {
			name = c
		}
		if mixed && c != s && (c == stackRaw || s == stackRaw) {
			return nil, fmt.Errorf("stack %q: raw talks only to raw", name)
		}
		if mixed && c != s && (webStack(c) || webStack(s)) {
			return nil, fmt.Errorf("stack %q: the net/http and Connect stacks run as they are", name)
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
// loopback port, over TLS when sec is not nil. A Serve that fails at once
// is reported as an error.
func startServer(im *impl, sec *benchTLS) (*runningServer, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv, err := newServerSafe(im, sec)
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

func newServerSafe(im *impl, sec *benchTLS) (srv grpcServer, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: server setup panicked: %v", im.name, r)
		}
	}()
	srv = im.newServer(sec)
	if im.name != stackRaw {
		testpb.RegisterBenchmarkServiceServer(srv, benchService{})
	}
	return srv, nil
}

// dialSafe dials addr with im (over TLS when sec is not nil, through
// netDial when it is not nil), turning a panic into an error.
func dialSafe(im *impl, addr string, sec *benchTLS, netDial netDialer) (cc grpc.ClientConnInterface, closeFn func() error, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: dial panicked: %v", im.name, r)
		}
	}()
	cc, closeFn, err = im.dial(addr, sec, netDial)
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

// webStack reports whether name is one of http_stacks.go's stacks.
func webStack(name string) bool {
	switch name {
	case stackLeanHTTP, stackGrpcHTTP, stackLeanConnect, stackConnectGo:
		return true
	}
	return false
}
