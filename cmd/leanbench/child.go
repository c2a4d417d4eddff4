package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Every run happens in a child process: leanbench re-executes itself with a
// hidden subcommand (run-one, idle-server, idle-client), or runs the binary
// of -baseline the same way for the baseline's stack. A stack that
// panics in one of its own goroutines then costs one error row instead of
// the whole benchmark, and each run starts from a fresh process.
//
// A child answers with one JSON object per line on stdout (childMsg) and
// takes commands, one per line, on stdin. It exits when stdin closes.

const childEnv = "LEANBENCH_CHILD" // set in every child's environment

type childMsg struct {
	Addr   string    `json:"addr,omitempty"`   // idle-server: listening
	Ready  bool      `json:"ready,omitempty"`  // idle-client: connections open
	Side   *IdleSide `json:"side,omitempty"`   // idle-*: figures after "measure"
	Result *Result   `json:"result,omitempty"` // run-one
	Error  string    `json:"error,omitempty"`
	// Opened and OpenSeconds are the idle client's progress while it
	// opens its connections: how many made their RPC so far, and in what
	// time (see openProgress).
	Opened      int     `json:"opened,omitempty"`
	OpenSeconds float64 `json:"openSeconds,omitempty"`
}

// child is a running child process.
type child struct {
	what   string // for error messages
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	stderr *capWriter
	ctx    context.Context
	waited bool
}

// startChild starts leanbench with args: the binary exe, or this one when
// exe is ""; ctx bounds its life.
func startChild(ctx context.Context, what, exe string, args ...string) (*child, error) {
	if exe == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding own executable: %w", err)
		}
		exe = self
	}
	var err error
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	c := &child{what: what, cmd: cmd, stderr: &capWriter{max: 64 << 10}, ctx: ctx}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", what, err)
	}
	c.lines = bufio.NewScanner(stdout)
	c.lines.Buffer(make([]byte, 64<<10), 4<<20)
	return c, nil
}

// read returns the child's next message. A message with Error set, or a
// child that ends without one, is an error.
func (c *child) read() (childMsg, error) {
	var m childMsg
	if !c.lines.Scan() {
		return m, c.exitError()
	}
	if err := json.Unmarshal(c.lines.Bytes(), &m); err != nil {
		return m, fmt.Errorf("%s said %q: %w", c.what, c.lines.Text(), err)
	}
	if m.Error != "" {
		return m, errors.New(m.Error)
	}
	return m, nil
}

func (c *child) send(line string) error {
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		return fmt.Errorf("%s: %w", c.what, c.exitError())
	}
	return nil
}

// exitError waits for a child that stopped talking and describes how it
// ended: the panic message and where it happened, if it panicked.
func (c *child) exitError() error {
	c.stdin.Close()
	c.wait(5 * time.Second)
	if c.ctx.Err() != nil {
		return fmt.Errorf("%s: killed after its time limit", c.what)
	}
	status := "exited"
	if st := c.cmd.ProcessState; st != nil {
		status = st.String()
	}
	if msg := crashSummary(c.stderr.String()); msg != "" {
		return fmt.Errorf("%s crashed: %s", c.what, msg)
	}
	return fmt.Errorf("%s ended early (%s)", c.what, status)
}

// finish closes stdin and waits for the child, killing it if it lingers.
func (c *child) finish() {
	c.stdin.Close()
	c.wait(10 * time.Second)
}

func (c *child) wait(d time.Duration) {
	if c.waited {
		return
	}
	c.waited = true
	if !within(d, func() { c.cmd.Wait() }) {
		c.cmd.Process.Kill()
		within(d, func() { c.cmd.Wait() })
	}
}

// forwardStderr copies what the child wrote on stderr, indented.
func (c *child) forwardStderr(w io.Writer) {
	s := strings.TrimSpace(c.stderr.String())
	if s == "" {
		return
	}
	for _, l := range strings.Split(s, "\n") {
		fmt.Fprintf(w, "    %s: %s\n", c.what, l)
	}
}

// crashSummary extracts "panic: msg (in func)" from a Go crash dump: the
// first panic or fatal error line, and the innermost frame of the crashing
// goroutine outside the standard library.
func crashSummary(stderr string) string {
	lines := strings.Split(stderr, "\n")
	msg := ""
	for i, l := range lines {
		if msg == "" {
			if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
				msg = strings.TrimSpace(l)
			}
			continue
		}
		if !strings.HasPrefix(l, "goroutine ") {
			continue
		}
		first := ""
		for _, fl := range lines[i+1:] {
			if fl == "" || strings.HasPrefix(fl, "goroutine ") {
				break
			}
			if strings.HasPrefix(fl, "\t") || strings.HasPrefix(fl, "created by ") {
				continue
			}
			fn := fl
			if j := strings.LastIndex(fn, "("); j > 0 && strings.HasSuffix(fn, ")") {
				fn = fn[:j]
			}
			if first == "" {
				first = fn
			}
			// Outside the standard library: a path whose first element
			// has a dot (a module), or package main.
			if pkg, _, ok := strings.Cut(fn, "/"); ok && strings.Contains(pkg, ".") || strings.HasPrefix(fn, "main.") {
				first = fn
				break
			}
		}
		if first == "" {
			return msg
		}
		return msg + " (in " + strings.TrimPrefix(first, "github.com/leangrpc/leangrpc/") + ")"
	}
	return msg
}

// capWriter keeps the first max bytes written to it.
type capWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - len(w.b); room > 0 {
		w.b = append(w.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (w *capWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
