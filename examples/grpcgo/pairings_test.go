package grpcgo

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	keep        = flag.Bool("keep", false, "keep the temporary module with the converted sources and binaries, and print its path")
	programTags = flag.String("programtags", "", "build tags for the example programs (leangrpcportable: leangrpc's portable socket path)")
)

// example describes how to run one of grpc-go's feature examples: its
// programs, the processes of a pairing, when the client is done, and how its
// output is normalised before the comparison with the grpc-go/grpc-go
// pairing.
type example struct {
	name string
	// server and client are the programs' directories under
	// features/<name>; server is empty when one program is both ends, and
	// then the server rules convert its server half and the client rules
	// its client half.
	server, client string
	// servers holds the arguments of each server process to start.
	servers [][]string
	// ready lists the addresses ("tcp:host:port" or "unix:@name") that
	// accept connections once the servers are up.
	ready      []string
	clientArgs []string
	// fixedPorts are the TCP ports the example's code has no flag for;
	// examples sharing one never run at the same time.
	fixedPorts []int
	// done, when set, says the client (which runs forever) has shown
	// what it is meant to; it is then stopped.
	done func(out string, ran time.Duration) bool
	// whileRunning, when set, checks the programs once done is true and
	// before the client is stopped.
	whileRunning func(t *testing.T, p pairing, env map[string]string)
	// normalise turns the client's output (log timestamps already
	// removed) into the lines compared.
	normalise func(lines []string) []string
	// gap names the leangrpc gap that makes the pairing differ, or "".
	gap func(p pairing) string
	// linuxOnly marks an example using what only Linux has, ipv6 one
	// that needs IPv6 loopback.
	linuxOnly, ipv6 bool
}

type pairing struct{ leanServer, leanClient bool }

func (p pairing) String() string {
	side := func(lean bool) string {
		if lean {
			return "leangrpc"
		}
		return "grpcgo"
	}
	return side(p.leanServer) + "-server_" + side(p.leanClient) + "-client"
}

var pairings = []pairing{{false, false}, {true, false}, {false, true}, {true, true}}

// program is one build of one example program.
type program struct {
	example, dir string
	rules        Rules
}

func (p program) pkgDir() string {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	d := strings.ReplaceAll(strings.Trim(p.dir, "./"), "/", "_")
	if d == "" {
		d = "main"
	}
	return fmt.Sprintf("%s-%s-s%sc%s", p.example, d, b(p.rules.Server), b(p.rules.Client))
}

func (e *example) programs(p pairing) (server *program, client program) {
	if e.server == "" {
		return nil, program{e.name, e.client, Rules{Server: p.leanServer, Client: p.leanClient}}
	}
	return &program{e.name, e.server, Rules{Server: p.leanServer}}, program{e.name, e.client, Rules{Client: p.leanClient}}
}

// workspace is the temporary module holding the converted programs and
// their binaries.
type workspace struct {
	dir       string
	bins      map[program]string // binary path
	buildErrs map[program]string // compiler output of a program that did not build
}

// goList returns the directory of module mod as this module resolves it.
func goList(t *testing.T, mod string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-json", mod).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", mod, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go list -m %s: no directory (%v); run go mod download", mod, err)
	}
	return m.Dir
}

// tempModulePath is the temporary module's path. It lies under grpc-go's
// so that the programs may import google.golang.org/grpc/internal as the
// examples module does (customloadbalancer's client parses its service
// config with internal.ParseServiceConfig).
const tempModulePath = "google.golang.org/grpc/leangrpcexamples"

// prepare copies every program of the examples, converted as each pairing
// needs, into a temporary module and builds them all with one go build.
func prepare(t *testing.T, examples []*example) *workspace {
	t.Helper()
	exDir := goList(t, "google.golang.org/grpc/examples")
	grpcDir := goList(t, "google.golang.org/grpc")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "leangrpc-grpcgo-examples-")
	if err != nil {
		t.Fatal(err)
	}
	if *keep {
		t.Logf("temporary module kept in %s", dir)
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mod = regexp.MustCompile(`(?m)^module .*$`).ReplaceAll(mod, []byte("module "+tempModulePath))
	mod = bytes.ReplaceAll(mod, []byte("=> ../.."), []byte("=> "+root))
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}

	renames := map[Rules]Renames{}
	for _, r := range []Rules{{}, {Server: true}, {Client: true}, {Server: true, Client: true}} {
		if renames[r], err = RenamesFor(grpcDir, r); err != nil {
			t.Fatal(err)
		}
	}
	ws := &workspace{dir: dir, bins: map[program]string{}, buildErrs: map[program]string{}}
	var pkgs []string
	for _, e := range examples {
		for _, p := range pairings {
			s, c := e.programs(p)
			for _, pr := range []*program{s, &c} {
				if pr == nil {
					continue
				}
				if _, ok := ws.bins[*pr]; ok {
					continue
				}
				if err := convertDir(filepath.Join(exDir, "features", e.name, pr.dir), filepath.Join(dir, pr.pkgDir()), renames[pr.rules]); err != nil {
					t.Fatal(err)
				}
				bin := filepath.Join(dir, "bin", pr.pkgDir())
				if runtime.GOOS == "windows" {
					bin += ".exe"
				}
				ws.bins[*pr] = bin
				pkgs = append(pkgs, "./"+pr.pkgDir())
			}
		}
	}
	start := time.Now()
	// -s -w: no symbol table or DWARF, which halves the link time of
	// forty programs.
	args := []string{"build", "-ldflags=-s -w", "-tags=" + *programTags, "-o", filepath.Join(dir, "bin") + string(filepath.Separator)}
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("built %d programs in %v", len(pkgs), time.Since(start).Round(time.Millisecond))
	if err != nil {
		// go build writes the binaries it could build; the output says
		// "# <package>" before the errors of each that it could not.
		sections := map[string]string{}
		var cur string
		for _, l := range strings.SplitAfter(string(out), "\n") {
			if strings.HasPrefix(l, "# ") {
				cur = strings.TrimPrefix(strings.TrimSpace(l), "# "+tempModulePath+"/")
				continue
			}
			sections[cur] += l
		}
		for pr, bin := range ws.bins {
			if _, statErr := os.Stat(bin); statErr == nil {
				continue
			}
			msg := sections[pr.pkgDir()]
			if msg == "" {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			ws.buildErrs[pr] = "build failed:\n" + strings.ReplaceAll(msg, dir+string(filepath.Separator), "")
			delete(ws.bins, pr)
		}
	}
	return ws
}

// convertDir copies the Go files of src into dst, converted by Convert.
func convertDir(src, dst string, renames Renames) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if b, err = Convert(e.Name(), b, renames); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// syncBuffer collects a process's stdout and stderr in the order written.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// result is what a pairing showed: the client's normalised output and how
// it ended.
type result struct {
	lines  []string
	status string
	raw    string // the client's output as written, for failure messages
	server string // the servers' output, for failure messages
}

func (r result) text() string { return strings.Join(append(r.lines, "<"+r.status+">"), "\n") }

// portLocks serialises the examples that use the same fixed port.
var portLocks sync.Map // int -> *sync.Mutex

func lockPorts(ports []int) func() {
	ps := append([]int(nil), ports...)
	sort.Ints(ps)
	var held []*sync.Mutex
	for _, p := range ps {
		m, _ := portLocks.LoadOrStore(p, new(sync.Mutex))
		mu := m.(*sync.Mutex)
		mu.Lock()
		held = append(held, mu)
	}
	return func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i].Unlock()
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// waitReady waits until each address accepts a connection.
func waitReady(ctx context.Context, addrs []string) error {
	for _, a := range addrs {
		network, addr, _ := strings.Cut(a, ":")
		for {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s did not accept connections: %v", a, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

var logTimestamp = regexp.MustCompile(`^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d `)

// protoTextSpace matches the space protobuf's text format adds after a
// field name at random (differently in each binary, on purpose).
var protoTextSpace = regexp.MustCompile(`([A-Za-z0-9_]):\s+"`)

// commonNormalise removes what differs from run to run in any example: log
// timestamps, protobuf's random text-format spacing, and the values of the
// pairing's placeholders (free ports, socket names), which become their
// names.
func commonNormalise(out string, env map[string]string) []string {
	var pairs []string
	for k, v := range env {
		pairs = append(pairs, v, "{"+k+"}")
	}
	rep := strings.NewReplacer(pairs...)
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		l = logTimestamp.ReplaceAllString(l, "")
		l = protoTextSpace.ReplaceAllString(l, `$1:"`)
		lines = append(lines, rep.Replace(l))
	}
	return lines
}

const (
	clientBound = 30 * time.Second // a client that takes longer has hung
	readyBound  = 10 * time.Second
)

// run runs one pairing of e: the servers, then the client until it exits
// or e.done says it has shown what it is meant to.
func run(t *testing.T, ws *workspace, e *example, p pairing) (result, error) {
	t.Helper()
	sp, cp := e.programs(p)
	for _, pr := range []*program{sp, &cp} {
		if pr != nil && ws.buildErrs[*pr] != "" {
			return result{lines: strings.Split(strings.TrimSpace(ws.buildErrs[*pr]), "\n"), status: "not built"}, nil
		}
	}
	env := map[string]string{"port": freePort(t), "name": fmt.Sprintf("leangrpc-example-%d-%d", os.Getpid(), time.Now().UnixNano())}
	expand := func(args []string) []string {
		out := make([]string, len(args))
		for i, a := range args {
			for k, v := range env {
				a = strings.ReplaceAll(a, "{"+k+"}", v)
			}
			out[i] = a
		}
		return out
	}
	var serverOut syncBuffer
	var servers []*exec.Cmd
	exitedServers := make(chan struct{}, len(e.servers))
	defer func() {
		for _, s := range servers {
			s.Process.Kill()
		}
		for range servers {
			<-exitedServers
		}
	}()
	if sp != nil {
		// Waiting for the servers ends early when one exits (a port
		// taken, a crash).
		ctx, cancel := context.WithTimeout(context.Background(), readyBound)
		defer cancel()
		for _, args := range e.servers {
			s := exec.Command(ws.bins[*sp], expand(args)...)
			s.Stdout, s.Stderr = &serverOut, &serverOut
			if err := s.Start(); err != nil {
				t.Fatal(err)
			}
			servers = append(servers, s)
			go func() {
				s.Wait()
				cancel()
				exitedServers <- struct{}{}
			}()
		}
		if err := waitReady(ctx, expand(e.ready)); err != nil {
			return result{}, fmt.Errorf("servers not ready: %v\nserver output:\n%s", err, serverOut.String())
		}
	}

	var out syncBuffer
	c := exec.Command(ws.bins[cp], expand(e.clientArgs)...)
	c.Stdout, c.Stderr = &out, &out
	start := time.Now()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	// A failed check in whileRunning ends the test's goroutine: the
	// client must not outlive it.
	defer c.Process.Kill()
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	var status string
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-exited:
			status = "exit status 0"
			if err != nil {
				status = err.Error()
			}
			break wait
		case <-tick.C:
			ran := time.Since(start)
			if e.done != nil && e.done(out.String(), ran) {
				if e.whileRunning != nil {
					e.whileRunning(t, p, env)
				}
				c.Process.Kill()
				<-exited
				status = "running until stopped"
				break wait
			}
			if ran > clientBound {
				c.Process.Kill()
				<-exited
				status = "hung"
				break wait
			}
		}
	}
	lines := commonNormalise(out.String(), env)
	if e.normalise != nil {
		lines = e.normalise(lines)
	}
	r := result{lines: lines, status: status, raw: out.String(), server: serverOut.String()}
	if strings.Contains(r.raw, addrInUse) {
		return r, fmt.Errorf("the client could not listen: %s", r.raw)
	}
	return r, nil
}

const addrInUse = "address already in use"

// portWait bounds the wait for a taken fixed port. The examples' ports
// (50050-50053) lie in Linux's ephemeral range: another process's
// connection that used one as its source port holds it for TIME_WAIT's
// 60s after closing, and no server can listen on it meanwhile.
const portWait = 65 * time.Second

// runRetrying runs a pairing, again every 2s while a fixed port is taken,
// and skips it when the port stays taken for portWait.
func runRetrying(t *testing.T, ws *workspace, e *example, p pairing) result {
	t.Helper()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		r, err := run(t, ws, e, p)
		if err == nil {
			return r
		}
		if !strings.Contains(err.Error(), addrInUse) {
			t.Fatal(err)
		}
		if time.Since(start) > portWait {
			t.Skipf("a fixed port stayed taken by another process for %v (on a shared machine, "+
				"reserve it: sysctl net.ipv4.ip_local_reserved_ports): %v", portWait, err)
		}
		if attempt == 1 {
			t.Logf("a port is taken; trying again every 2s for up to %v: %v", portWait, err)
		}
		time.Sleep(2 * time.Second)
	}
}

func TestExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs grpc-go's example programs")
	}
	ws := prepare(t, examples)
	for _, e := range examples {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			if e.linuxOnly && runtime.GOOS != "linux" {
				t.Skip("Linux only")
			}
			if e.ipv6 {
				l, err := net.Listen("tcp", "[::1]:0")
				if err != nil {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				l.Close()
			}
			unlock := lockPorts(e.fixedPorts)
			defer unlock()
			var want result
			for _, p := range pairings {
				t.Run(p.String(), func(t *testing.T) {
					if p != (pairing{}) && want.status == "" {
						t.Skip("no grpc-go pairing to compare with")
					}
					got := runRetrying(t, ws, e, p)
					if p == (pairing{}) {
						want = got
						t.Logf("client output, normalised:\n%s", got.text())
						if strings.HasPrefix(got.status, "hung") {
							t.Fatalf("the grpc-go pairing hung; client output:\n%s\nserver output:\n%s", got.raw, got.server)
						}
						return
					}
					gap := ""
					if e.gap != nil {
						gap = e.gap(p)
					}
					if got.text() == want.text() {
						if gap != "" {
							t.Fatalf("behaves as with grpc-go although marked as the leangrpc gap %q: remove the mark", gap)
						}
						return
					}
					diff := fmt.Sprintf("client output, normalised (want = grpc-go at both ends):\n--- got\n%s\n--- want\n%s\n--- client output as written\n%s\n--- server output\n%s",
						got.text(), want.text(), got.raw, got.server)
					if gap != "" {
						t.Skipf("known leangrpc gap: %s\n%s", gap, diff)
					}
					t.Error(diff)
				})
			}
		})
	}
}
