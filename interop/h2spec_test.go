package interop_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The h2spec version and what it runs with --strict: 145 cases plus the one
// strict mode adds, as internal/h2conn's TestH2spec.
const (
	h2specModule  = "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible"
	h2specCases   = 146
	h2specTimeout = 3 * time.Minute // the whole run
	h2specCaseSec = "2"             // seconds h2spec waits for each expected frame
)

// TestH2specInteropServer runs h2spec --strict against the gRPC interop
// server (leangrpc.Server with grpc-go's TestService), which must pass every
// case: h2spec's requests are not gRPC, so this checks the server's plain
// HTTP answers and that a rejected request's stream stays open (counted
// against the stream limit, its content-length and flow control checked)
// until the client ends it. The server is given a finite stream limit
// (-max_concurrent_streams 100), which h2spec's 5.1.2 case needs.
func TestH2specInteropServer(t *testing.T) {
	if testing.Short() {
		t.Skip("h2spec takes a while; not run with -short")
	}
	bin := h2specBinary(t)
	srv := startServer(t, leanServer.get(t), "-max_concurrent_streams=100")

	report := filepath.Join(t.TempDir(), "report.xml")
	ctx, cancel := context.WithTimeout(context.Background(), h2specTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-h", "127.0.0.1", "-p", fmt.Sprint(srv.port),
		"--strict", "-j", report, "-o", h2specCaseSec)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	runErr := cmd.Run() // h2spec exits 1 when a case fails
	if ctx.Err() != nil {
		t.Fatalf("h2spec did not finish within %v; its output:\n%s", h2specTimeout, tail(out.Bytes()))
	}
	res, err := parseH2specReport(report)
	if err != nil {
		t.Fatalf("h2spec report: %v (h2spec: %v); output:\n%s", err, runErr, tail(out.Bytes()))
	}
	t.Logf("h2spec --strict against the interop server: %d/%d cases pass (%d failed, %d skipped) in %v",
		res.passed, res.total, len(res.failed), res.skipped, time.Since(start).Round(time.Millisecond))
	for _, f := range res.failed {
		t.Errorf("FAIL %s\n%s", f.name, f.msg)
	}
	if res.total != h2specCases || res.passed != h2specCases {
		t.Errorf("h2spec --strict: %d/%d cases pass, want %d/%d", res.passed, res.total, h2specCases, h2specCases)
	}
	select {
	case <-srv.done:
		t.Errorf("the interop server exited during the run (%v); output:\n%s", srv.cmd.ProcessState, tail(srv.out.From(0)))
	default:
	}
}

// h2specBinary returns the path of the h2spec binary, installing it into
// the Go build cache's leangrpc-tools directory on first use (the same
// place internal/h2conn's test uses). It skips the test when the module
// proxy cannot be reached.
func h2specBinary(t *testing.T) string {
	t.Helper()
	cacheOut, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil || len(bytes.TrimSpace(cacheOut)) == 0 {
		t.Skipf("h2spec: cannot locate GOCACHE: %v", err)
	}
	toolDir := filepath.Join(string(bytes.TrimSpace(cacheOut)), "leangrpc-tools")
	bin := filepath.Join(toolDir, "h2spec")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(toolDir, 0o755); err != nil {
		t.Skipf("h2spec: %v", err)
	}
	// Install from outside this module, with GOFLAGS cleared, so go.mod is
	// not touched.
	cmd := exec.Command("go", "install", h2specModule)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+toolDir, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("h2spec is not installed and could not be installed from the Go module proxy (%v); NOT RUN:\n%s", err, out)
	}
	return bin
}

type h2specResult struct {
	total, passed, skipped int
	failed                 []h2specFailure
}

type h2specFailure struct{ name, msg string }

// parseH2specReport reads h2spec's JUnit report. Cases are named
// "<group>/<n> <section>: <description>", n counting from 1 within the
// group as h2spec numbers them.
func parseH2specReport(path string) (h2specResult, error) {
	var res h2specResult
	data, err := os.ReadFile(path)
	if err != nil {
		return res, err
	}
	// Failure messages quote what the server sent, raw: control characters
	// are not allowed in XML.
	data = bytes.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' {
			return '?'
		}
		return r
	}, data)
	type text struct {
		Text string `xml:",chardata"`
	}
	var rep struct {
		Suites []struct {
			Name    string `xml:"name,attr"`
			Package string `xml:"package,attr"`
			Cases   []struct {
				ClassName string `xml:"classname,attr"`
				Failure   *text  `xml:"failure"`
				Error     *text  `xml:"error"`
				Skipped   *text  `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &rep); err != nil {
		return res, err
	}
	for _, s := range rep.Suites {
		n := 0
		for _, c := range s.Cases {
			if c.ClassName == "" {
				continue // h2spec writes empty placeholder elements
			}
			n++
			res.total++
			name := fmt.Sprintf("%s/%d %s: %s", s.Package, n, s.Name, c.ClassName)
			switch {
			case c.Failure != nil:
				res.failed = append(res.failed, h2specFailure{name, strings.TrimSpace(c.Failure.Text)})
			case c.Error != nil:
				res.failed = append(res.failed, h2specFailure{name, strings.TrimSpace(c.Error.Text)})
			case c.Skipped != nil:
				res.skipped++
			default:
				res.passed++
			}
		}
	}
	if res.total == 0 {
		return res, errors.New("no test cases in the report")
	}
	return res, nil
}
