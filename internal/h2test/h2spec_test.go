package h2test

import (
	"os"
	"path/filepath"
	"testing"
)

// The report parser is what decides pass or fail for both h2spec tests: it
// must count failures, errors and skips, and ignore placeholder elements.
func TestParseH2specReport(t *testing.T) {
	const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="1. Starting HTTP/2" package="http2/3.5" tests="2">
    <testcase classname=""></testcase>
    <testcase classname="Sends a client connection preface"></testcase>
    <testcase classname="Sends invalid connection preface"><failure>Expected: GOAWAY` + "\x01" + `</failure></testcase>
  </testsuite>
  <testsuite name="5.1.2. Stream Concurrency" package="http2/5.1.2" tests="2">
    <testcase classname="exceeds the limit"><skipped>no limit</skipped></testcase>
    <testcase classname="other"><error>timeout</error></testcase>
  </testsuite>
</testsuites>`
	path := filepath.Join(t.TempDir(), "r.xml")
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := parseH2specReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 4 || res.Passed != 1 || res.Skipped != 1 || len(res.Failed) != 2 {
		t.Fatalf("got %+v; want 4 total, 1 passed, 1 skipped, 2 failed", res)
	}
	if want := "http2/3.5/2 1. Starting HTTP/2: Sends invalid connection preface"; res.Failed[0].Name != want {
		t.Errorf("failure name %q; want %q", res.Failed[0].Name, want)
	}
	if res.Complete() {
		t.Error("Complete() with failures")
	}
	if _, err := parseH2specReport(filepath.Join(t.TempDir(), "missing.xml")); err == nil {
		t.Error("a missing report parsed without error")
	}
}
