package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// nghttpd, nghttp2's own C HTTP/2 server, is the benchmark's floor: it
// answers h2load's UnaryCall request with a static file holding the bytes
// of the gRPC answer, so what it costs is HTTP/2 alone, in C, with no gRPC
// work (no protobuf, no handler, no status to map). It is not a gRPC
// server, so the streaming shape, the idle connections (made by a gRPC
// client) and the attacks leave it out.

// nghttpdWorkers is nghttpd's -n. With one worker nghttpd serves every
// connection on its main thread, so on one core at most; with more, the
// main thread only accepts and hands the connections round-robin to that
// many worker threads, each with an event loop of its own. Two is what
// tonic gets (2 runtime workers) and what the Go servers get on the 2-core
// machines this benchmark runs on (GOMAXPROCS), and h2load's 2 connections
// then land on one worker each.
const nghttpdWorkers = 2

// nghttpdDefaultStreams is nghttpd's default
// SETTINGS_MAX_CONCURRENT_STREAMS.
const nghttpdDefaultStreams = 100

// nghttpdDocRoot is nghttpd's document root under dir.
func nghttpdDocRoot(dir string) string { return filepath.Join(dir, "nghttpd-htdocs") }

// writeNghttpdDocRoot puts the gRPC answer at the method's path under
// root, so h2load's URL serves it as it is. nghttpd answers a POST as a
// GET once the request's body has ended, discarding the body (it keeps
// uploads only with --echo-upload), as a unary gRPC server answers once
// the request has ended.
func writeNghttpdDocRoot(root string, payload int) error {
	f := filepath.Join(root, filepath.FromSlash(unaryMethod))
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		return err
	}
	return os.WriteFile(f, unaryResponseFrame(payload), 0o644)
}

// nghttpdArgs are nghttpd's arguments for serving root on port.
func nghttpdArgs(o options, root string, port int) []string {
	return []string{
		"--no-tls",
		"-a", "127.0.0.1",
		"-d", root,
		"-n", strconv.Itoa(nghttpdWorkers),
		// nghttpd's default would hold back an h2load -m above it.
		"-m", strconv.Itoa(max(o.streams, nghttpdDefaultStreams)),
		// Every gRPC answer ends with trailers. With this one nghttpd's
		// answer is made of the same frames (HEADERS, DATA, trailing
		// HEADERS), so the floor does not save a frame the others must
		// write.
		"--trailer", "grpc-status: 0",
		strconv.Itoa(port),
	}
}

// startNghttpd starts nghttpd on a free loopback port and waits until it
// accepts connections. nghttpd prints nothing when it listens and cannot
// be asked for port 0's choice, so a free port is picked here first; one
// taken in between makes nghttpd exit, and another is tried.
func startNghttpd(ctx context.Context, o options, bin string) (*serverProc, error) {
	root := nghttpdDocRoot(o.binDir)
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			return nil, err
		}
		var p *serverProc
		if p, err = launch(serverNghttpd, exec.Command(bin, nghttpdArgs(o, root, port)...), func(string) {}); err != nil {
			return nil, err
		}
		p.endsOnSIGTERM = true
		p.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err = waitAccepting(ctx, p); err == nil {
			return p, nil
		}
		p.stop()
		if ctx.Err() != nil {
			break
		}
	}
	return nil, err
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitAccepting dials p.addr until a connection succeeds.
func waitAccepting(ctx context.Context, p *serverProc) error {
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before listening: %v\n%s", p.name, p.err, p.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not accept connections on %s: %v\n%s", p.name, p.addr, err, p.log)
		}
	}
}

// verifyStaticAnswer is nghttpd's check before it is measured, in place of
// verifyUnary's gRPC call: a gRPC client rejects nghttpd's answer, which
// has no content-type application/grpc (nghttpd takes the type from the
// file name's extension, and the method's path has none). So one request
// as h2load sends it goes through a plain HTTP/2 client, and the answer
// must be HTTP 200 with exactly the gRPC answer's bytes and the trailer
// grpc-status 0. h2load's own check (HTTP 200 and the DATA byte count)
// then holds for nghttpd as it is.
func verifyStaticAnswer(ctx context.Context, addr string, payload int) error {
	body, trailer, err := postUnaryH2C(ctx, addr, payload)
	if err != nil {
		return fmt.Errorf("check request: %v", err)
	}
	if want := unaryResponseFrame(payload); !bytes.Equal(body, want) {
		return fmt.Errorf("check request: answer % x, want the gRPC answer % x", body, want)
	}
	if got := trailer.Get("grpc-status"); got != "0" {
		return fmt.Errorf("check request: trailer grpc-status %q, want 0", got)
	}
	return nil
}

// postUnaryH2C sends h2load's request over cleartext HTTP/2 and returns
// the answer's body and trailers; an answer other than HTTP 200 is an
// error.
func postUnaryH2C(ctx context.Context, addr string, payload int) ([]byte, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true) // and no HTTP/1: prior knowledge, as h2load
	tr := &http.Transport{Protocols: &protocols}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+unaryMethod,
		bytes.NewReader(unaryRequestFrame(payload)))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, errors.New("HTTP status " + resp.Status)
	}
	return body, resp.Trailer, nil
}
