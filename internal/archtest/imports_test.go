// Package archtest holds the import-graph test that keeps the layers of
// ARCHITECTURE.md honest: each package imports only the layers beneath it.
package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/leangrpc/leangrpc"

// allowed lists, for each internal package, the module packages and the
// outside module paths (by prefix) it may import in non-test files. The
// standard library is always allowed.
var allowed = map[string][]string{
	"internal/hpack":      {},
	"internal/protoalias": {"google.golang.org/protobuf"},
	"internal/bufpool":    {"google.golang.org/grpc/mem"},
	"internal/budget":     {},
	"internal/sockio":     {"internal/bufpool", "golang.org/x/sys"},
	"internal/h2frame":    {"internal/bufpool", "internal/hpack", "internal/budget"},
	"internal/h2conn":     {"internal/h2frame", "internal/hpack", "internal/bufpool", "internal/sockio", "internal/budget"},
	"internal/grpcwire":   {"internal/protoalias", "internal/h2conn", "internal/h2frame", "internal/hpack", "internal/bufpool", "google.golang.org/grpc", "google.golang.org/protobuf", "google.golang.org/genproto"},
	"internal/webwire":    {"internal/grpcwire", "internal/h2conn", "internal/h2frame", "internal/hpack", "internal/bufpool", "google.golang.org/grpc", "google.golang.org/protobuf", "google.golang.org/genproto"},
	"internal/h2test":     {"internal/h2frame", "internal/hpack", "internal/bufpool"},

	// Generated test messages, imported only by protoalias's tests.
	"internal/protoalias/testmsg": {"google.golang.org/protobuf"},
}

type pkg struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	return pkgs
}

func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func TestImportLayers(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 3 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, imp := range p.Imports {
			if imp == "golang.org/x/net/http2" || strings.HasPrefix(imp, "golang.org/x/net/http2/") {
				t.Errorf("%s imports %s outside tests: x/net/http2 is a test oracle only", p.ImportPath, imp)
			}
			if strings.HasPrefix(rel, "internal/") && imp == module {
				t.Errorf("%s imports the root package", p.ImportPath)
			}
		}
		rules, ok := allowed[rel]
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			if isStd(imp) {
				continue
			}
			impRel := strings.TrimPrefix(imp, module+"/")
			okImp := false
			for _, r := range rules {
				if impRel == r || strings.HasPrefix(impRel, r+"/") || imp == r || strings.HasPrefix(imp, r+"/") {
					okImp = true
					break
				}
			}
			if !okImp {
				t.Errorf("%s may not import %s (allowed: %v)", rel, imp, rules)
			}
		}
	}
}

// TestRulesCoverInternal makes sure every internal package has a rule, so a
// new package cannot slip past the layering unnoticed.
func TestRulesCoverInternal(t *testing.T) {
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if !strings.HasPrefix(rel, "internal/") {
			continue
		}
		switch rel {
		case "internal/archtest":
			continue
		}
		if _, ok := allowed[rel]; !ok {
			t.Errorf("internal package %s has no import rule in archtest", rel)
		}
	}
}

// noIO lists the packages that may not import the standard library's
// network or system-call packages directly: how bytes reach a socket (a
// vectored write, a readiness wait) is the socket layer's decision, and a
// frame or wire package that switched on *net.TCPConn would take it over.
// (bufpool and grpc-go's mem bring them into the dependency graph, which
// is fine.)
var noIO = []string{"internal/hpack", "internal/h2frame", "internal/protoalias"}

func TestFrameLayersDoNoIO(t *testing.T) {
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, pkg := range noIO {
			if rel != pkg {
				continue
			}
			for _, imp := range p.Imports {
				if imp == "net" || imp == "syscall" || strings.HasPrefix(imp, "golang.org/x/sys") {
					t.Errorf("%s imports %s: I/O policy belongs to internal/sockio", rel, imp)
				}
			}
		}
	}
}
