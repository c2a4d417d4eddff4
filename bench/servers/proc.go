package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, which
// Linux fixes at 100 for user space whatever the kernel's tick rate.
const userHZ = 100

// serverProc is one running server process.
type serverProc struct {
	name string
	cmd  *exec.Cmd
	addr string
	log  *lineTail
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, set before done closes
	// endsOnSIGTERM is set for a server without a SIGTERM handler
	// (nghttpd): the signal's default action, death by it, is then the
	// normal end that stop asks for, not a failure.
	endsOnSIGTERM bool
}

// listeningRE finds the address in the line each server prints once it
// listens: "... listening on 127.0.0.1:PORT".
var listeningRE = regexp.MustCompile(`listening on (\S+)`)

// startServer starts a gRPC server, bin, on a free loopback port and waits
// until it listens.
func startServer(ctx context.Context, name, bin string, args ...string) (*serverProc, error) {
	addrc := make(chan string, 1)
	p, err := launch(name, exec.Command(bin, append([]string{"-port", "0"}, args...)...), func(line string) {
		if m := listeningRE.FindStringSubmatch(line); m != nil {
			select {
			case addrc <- m[1]:
			default:
			}
		}
	})
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case p.addr = <-addrc:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before listening: %v\n%s", name, p.err, p.log)
	case <-t.C:
	case <-ctx.Done():
	}
	p.stop()
	return nil, fmt.Errorf("%s did not report a listening address\n%s", name, p.log)
}

// startTimeout bounds how long a server may take to start listening.
const startTimeout = 15 * time.Second

// launch starts cmd, keeps the tail of its stderr for error messages and
// passes each stderr line to onLine.
func launch(name string, cmd *exec.Cmd, onLine func(string)) (*serverProc, error) {
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	p := &serverProc{name: name, cmd: cmd, log: &lineTail{max: 40}, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.log.add(line)
			onLine(line)
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop asks the server to stop (SIGTERM), kills it if it has not exited
// within a few seconds, and reports an abnormal exit.
func (p *serverProc) stop() error {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("%s did not stop on SIGTERM; killed", p.name)
		}
	}
	if p.err != nil && !(p.endsOnSIGTERM && terminatedBySIGTERM(p.err)) {
		return fmt.Errorf("%s: %v\n%s", p.name, p.err, p.log)
	}
	return nil
}

// terminatedBySIGTERM tells whether a Wait error says the process died of
// SIGTERM.
func terminatedBySIGTERM(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

func (p *serverProc) pid() int { return p.cmd.Process.Pid }

// lineTail keeps the last lines a server wrote, for error messages.
type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *lineTail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *lineTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// procSample is what /proc says about a process at one moment.
type procSample struct {
	cpu   time.Duration // user plus system time of all its threads
	ctxsw int64         // voluntary plus involuntary context switches of its live threads
}

func sampleProc(pid int) (procSample, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, err
	}
	ticks, err := parseStatCPU(string(b))
	if err != nil {
		return procSample{}, err
	}
	sw, err := contextSwitches(pid)
	if err != nil {
		return procSample{}, err
	}
	return procSample{cpu: time.Duration(ticks) * time.Second / userHZ, ctxsw: sw}, nil
}

// parseStatCPU returns utime+stime, in USER_HZ ticks, from the text of
// /proc/PID/stat. The command name in parentheses may hold spaces and
// parentheses, so the fields are counted from the last ')'.
func parseStatCPU(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	// After ')' come field 3 (state) onwards; utime and stime are fields
	// 14 and 15.
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, errors.New("/proc stat: too few fields")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: bad utime %q or stime %q", f[11], f[12])
	}
	return utime + stime, nil
}

// contextSwitches sums the context switches of the process's threads;
// each switch to a thread is one wake-up of it or one preemption.
func contextSwitches(pid int) (int64, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("no threads of process %d in /proc", pid)
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		sum += parseContextSwitches(string(b))
	}
	return sum, nil
}

func parseContextSwitches(status string) int64 {
	var sum int64
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			sum += n
		}
	}
	return sum
}

// residentBytes returns the process's resident set size (VmRSS).
func residentBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(string(b))
}

func parseVmRSS(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10, nil
				}
			}
			return 0, fmt.Errorf("/proc status: bad VmRSS line %q", line)
		}
	}
	return 0, errors.New("/proc status: no VmRSS")
}
