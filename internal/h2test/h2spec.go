package h2test

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

// h2spec v2.2.1 and what it runs with --strict: 145 cases plus the one
// strict mode adds.
const (
	h2specModule = "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible"
	// H2specCases is the number of cases h2spec --strict runs.
	H2specCases   = 146
	h2specTimeout = 3 * time.Minute // the whole run
	h2specCaseSec = "2"             // seconds h2spec waits for each expected frame
)

// H2specResult is what one h2spec run reported.
type H2specResult struct {
	Total, Passed, Skipped int
	Failed                 []H2specFailure
}

// Complete reports whether every one of the H2specCases cases passed.
func (r H2specResult) Complete() bool {
	return r.Total == H2specCases && r.Passed == H2specCases
}

// H2specFailure names a failing case and h2spec's message for it.
type H2specFailure struct{ Name, Msg string }

// RunH2spec runs h2spec --strict against 127.0.0.1:port within a bounded
// time, logs the pass count and every failing case, and returns the result.
// It installs h2spec on first use and skips the test when that is not
// possible (no module proxy): the test says so, it never passes silently.
func RunH2spec(t testing.TB, port int) H2specResult {
	t.Helper()
	bin := h2specBinary(t)
	report := filepath.Join(t.TempDir(), "report.xml")
	ctx, cancel := context.WithTimeout(context.Background(), h2specTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-h", "127.0.0.1", "-p", fmt.Sprint(port),
		"--strict", "-j", report, "-o", h2specCaseSec)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	runErr := cmd.Run() // h2spec exits 1 when a case fails
	elapsed := time.Since(start).Round(time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("h2spec did not finish within %v; its output so far:\n%s", h2specTimeout, lastLines(out.String(), 80))
	}
	res, err := parseH2specReport(report)
	if err != nil {
		t.Fatalf("h2spec report: %v (h2spec: %v); output:\n%s", err, runErr, lastLines(out.String(), 80))
	}
	t.Logf("h2spec --strict: %d/%d cases pass (%d failed, %d skipped) in %v",
		res.Passed, res.Total, len(res.Failed), res.Skipped, elapsed)
	for _, f := range res.Failed {
		t.Logf("FAIL %s\n    %s", f.Name, strings.ReplaceAll(f.Msg, "\n", "\n    "))
	}
	return res
}

// h2specBinary returns the path of the h2spec binary, installing it into
// the Go build cache's leangrpc-tools directory on first use, from outside
// this module so that go.mod is not touched.
func h2specBinary(t testing.TB) string {
	t.Helper()
	goBin := "go"
	if root := goEnv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			goBin = p
		}
	}
	cache := goEnv("GOCACHE")
	if cache == "" {
		t.Skip("h2spec: cannot locate GOCACHE; NOT RUN")
	}
	toolDir := filepath.Join(cache, "leangrpc-tools")
	bin := filepath.Join(toolDir, "h2spec")
	if fileExists(bin) {
		return bin
	}
	if err := os.MkdirAll(toolDir, 0o755); err != nil {
		t.Skipf("h2spec: %v; NOT RUN", err)
	}
	cmd := exec.Command(goBin, "install", h2specModule)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+toolDir, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("h2spec is not installed and could not be installed from the Go module proxy (%v); NOT RUN:\n%s", err, out)
	}
	return bin
}

func goEnv(name string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(out))
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// parseH2specReport reads h2spec's JUnit report. Cases are named
// "<group>/<n> <section>: <description>", n counting from 1 within the
// group as h2spec numbers them.
func parseH2specReport(path string) (H2specResult, error) {
	var res H2specResult
	data, err := os.ReadFile(path)
	if err != nil {
		return res, err
	}
	// Failure messages quote what the server sent, debug data included,
	// raw: control characters are not allowed in XML.
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
			res.Total++
			name := fmt.Sprintf("%s/%d %s: %s", s.Package, n, s.Name, c.ClassName)
			switch {
			case c.Failure != nil:
				res.Failed = append(res.Failed, H2specFailure{name, strings.TrimSpace(c.Failure.Text)})
			case c.Error != nil:
				res.Failed = append(res.Failed, H2specFailure{name, strings.TrimSpace(c.Error.Text)})
			case c.Skipped != nil:
				res.Skipped++
			default:
				res.Passed++
			}
		}
	}
	if res.Total == 0 {
		return res, errors.New("no test cases in the report")
	}
	return res, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
