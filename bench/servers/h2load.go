package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// unaryMethod is the path h2load posts to.
const unaryMethod = "/grpc.testing.TestService/UnaryCall"

// unaryRequest asks for a response with a payload of the same size as its
// own.
func unaryRequest(payload int) *testpb.SimpleRequest {
	return &testpb.SimpleRequest{
		ResponseSize: int32(payload),
		Payload:      &testpb.Payload{Body: make([]byte, payload)},
	}
}

// grpcFrame prefixes msg with gRPC's message header (uncompressed).
func grpcFrame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// unaryRequestFrame is the request body h2load sends.
func unaryRequestFrame(payload int) []byte {
	msg, err := proto.Marshal(unaryRequest(payload))
	if err != nil {
		panic(err) // cannot fail for this message
	}
	return grpcFrame(msg)
}

// unaryResponseFrame is the DATA of a successful answer to
// unaryRequestFrame: grpc-go's interop server answers with a payload of
// zeros of the asked size and of the default type, which proto3 does not
// encode. nghttpd serves these bytes as a static file.
func unaryResponseFrame(payload int) []byte {
	msg, err := proto.Marshal(&testpb.SimpleResponse{Payload: &testpb.Payload{Body: make([]byte, payload)}})
	if err != nil {
		panic(err) // cannot fail for this message
	}
	return grpcFrame(msg)
}

// unaryResponseFrameLen is the size of the DATA a successful response
// carries. An error status comes as trailers only, without DATA, so the
// received DATA bytes tell whether every response succeeded.
func unaryResponseFrameLen(payload int) int64 {
	return int64(len(unaryResponseFrame(payload)))
}

// h2loadResult is what h2load reported about one run.
type h2loadResult struct {
	reqPerSec float64
	done      int64
	succeeded int64
	failed    int64
	errored   int64
	timeout   int64
	status2xx int64
	dataBytes int64
	cpu       time.Duration // h2load's own user plus system time
}

var (
	finishedRE = regexp.MustCompile(`(?m)^finished in [0-9.]+[a-z]+, ([0-9.]+) req/s`)
	requestsRE = regexp.MustCompile(`(?m)^requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	statusRE   = regexp.MustCompile(`(?m)^status codes: (\d+) 2xx`)
	trafficRE  = regexp.MustCompile(`(?m)^traffic: .*[, ]\((\d+)\) data`)
)

// parseH2load reads the summary h2load prints at the end of a run.
func parseH2load(out string) (h2loadResult, error) {
	var r h2loadResult
	m := finishedRE.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("h2load output has no \"finished in\" line")
	}
	var err error
	if r.reqPerSec, err = strconv.ParseFloat(m[1], 64); err != nil {
		return r, fmt.Errorf("h2load req/s %q: %v", m[1], err)
	}
	ints := func(re *regexp.Regexp, what string, dst ...*int64) error {
		m := re.FindStringSubmatch(out)
		if m == nil {
			return fmt.Errorf("h2load output has no %s line", what)
		}
		for i, d := range dst {
			if *d, err = strconv.ParseInt(m[i+1], 10, 64); err != nil {
				return fmt.Errorf("h2load %s: %v", what, err)
			}
		}
		return nil
	}
	if err := ints(requestsRE, "requests", &r.done, &r.succeeded, &r.failed, &r.errored, &r.timeout); err != nil {
		return r, err
	}
	if err := ints(statusRE, "status codes", &r.status2xx); err != nil {
		return r, err
	}
	if err := ints(trafficRE, "traffic", &r.dataBytes); err != nil {
		return r, err
	}
	return r, nil
}

// check fails a run in which any request failed or any response was not a
// success carrying the expected message. inflight is the most requests
// h2load has open at once: when the window closes it stops counting
// requests as done, but it has already counted the status and DATA of up
// to that many responses still open, so those counts may exceed the done
// requests by that much and no more.
func (r h2loadResult) check(respFrameLen, inflight int64) error {
	switch {
	case r.done == 0:
		return errors.New("h2load completed no request")
	case r.failed+r.errored+r.timeout > 0 || r.succeeded != r.done:
		return fmt.Errorf("h2load: %d done, %d succeeded, %d failed, %d errored, %d timeout",
			r.done, r.succeeded, r.failed, r.errored, r.timeout)
	case r.status2xx < r.done || r.status2xx > r.done+inflight:
		return fmt.Errorf("h2load: %d responses had HTTP status 2xx for %d requests done", r.status2xx, r.done)
	case r.dataBytes%respFrameLen != 0 || r.dataBytes < r.done*respFrameLen || r.dataBytes > (r.done+inflight)*respFrameLen:
		return fmt.Errorf("h2load received %d DATA bytes for %d responses, want %d each: some responses were not grpc-status 0",
			r.dataBytes, r.done, respFrameLen)
	}
	return nil
}

// h2loadArgs are h2load's arguments for a run of d against addr.
func h2loadArgs(o options, addr, body string, d time.Duration) []string {
	return []string{
		"-c", strconv.Itoa(o.clients), "-m", strconv.Itoa(o.streams),
		"-D", strconv.FormatInt(d.Milliseconds(), 10) + "ms",
		"-d", body,
		"-H", "content-type: application/grpc",
		"-H", "te: trailers",
		"http://" + addr + unaryMethod,
	}
}

// runH2load runs h2load for d and returns its parsed summary.
func runH2load(ctx context.Context, o options, addr, body string, d time.Duration) (h2loadResult, error) {
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.h2load, h2loadArgs(o, addr, body, d)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return h2loadResult{}, fmt.Errorf("h2load: %v\n%s", err, tail(string(out), 20))
	}
	r, err := parseH2load(string(out))
	if err != nil {
		return r, fmt.Errorf("%v\n%s", err, tail(strings.TrimSpace(string(out)), 20))
	}
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
}
