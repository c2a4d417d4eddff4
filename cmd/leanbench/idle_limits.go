package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The idle workload holds N connections open at once, which runs into
// two limits of the machine: open files per process (each child holds one
// descriptor per connection) and ephemeral ports (the client needs a
// local port per connection toward the server's one address). They are
// checked before any child starts, so that a -connections beyond them is
// refused with the limit and the shortfall, rather than ending as EMFILE
// in a child or as a connect that finds no free port, after minutes of
// dialing.

// idleFileMargin is the descriptors an idle child holds besides its
// connections: stdio, the runtime's poller, the listener, leangrpc's idle
// waiter and the files read while measuring; a dozen, counted with room.
const idleFileMargin = 64

// maxLoopbackSources is how many client source addresses 127/8 offers:
// 127.0.0.1 up to 127.255.255.254 (Linux routes all of 127/8 to lo).
const maxLoopbackSources = 1<<24 - 2

// idleLimits are the limits of this machine that bound the idle workload.
// A zero field is unknown (another OS) and not checked.
type idleLimits struct {
	// files is RLIMIT_NOFILE's hard limit: the children inherit it and
	// raise their soft limit to it (raiseFileLimit); only root raises it.
	files uint64
	// portLow and portHigh are net.ipv4.ip_local_port_range.
	portLow, portHigh int
}

// readIdleLimits reads this process's limits, which its children inherit.
func readIdleLimits() idleLimits {
	var l idleLimits
	if _, max, err := fileLimits(); err == nil {
		l.files = max
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			lo, err1 := strconv.Atoi(f[0])
			hi, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && lo > 0 && hi >= lo {
				l.portLow, l.portHigh = lo, hi
			}
		}
	}
	return l
}

// filesNeeded is the open files each idle child needs for n connections.
func filesNeeded(n int) uint64 { return uint64(n) + idleFileMargin }

// portsPerSource is how many connections the client makes from one source
// address to the server's address, 0 when unknown. A TCP connection is
// unique by its four-tuple, so the whole ephemeral range is there toward
// one destination, but Linux's connect() tries the even half of the range
// first and, once that half is taken, walks all of it for every new port:
// opening slows down tenfold past half the range. So one source takes half
// the range, less a tenth for the machine's other sockets, and more
// connections go to more source addresses.
func (l idleLimits) portsPerSource() int {
	if l.portLow == 0 {
		return 0
	}
	half := (l.portHigh - l.portLow + 1) / 2
	return max(half-half/10, 1)
}

// idlePlan is how n idle connections fit this machine.
type idlePlan struct {
	conns int
	// sources is how many loopback source addresses the client spreads
	// its connections over (loopbackSources); 1 leaves the choice to the
	// kernel, as a client without a plan does.
	sources int
	limits  idleLimits
}

// planIdle checks n connections against lim and says how they fit. The
// error names the limit, what n needs and by how much it is short.
func planIdle(n int, lim idleLimits) (idlePlan, error) {
	p := idlePlan{conns: n, sources: 1, limits: lim}
	if need := filesNeeded(n); lim.files > 0 && need > lim.files {
		fit := int64(lim.files) - idleFileMargin
		return p, fmt.Errorf("-connections %d needs about %d open files in each idle child (server and client: one per connection, %d spare), "+
			"%d more than this machine allows a process (RLIMIT_NOFILE hard limit %d, which only root can raise); at most %d connections fit",
			n, need, idleFileMargin, need-lim.files, lim.files, max(fit, 0))
	}
	if per := lim.portsPerSource(); per > 0 {
		p.sources = (n + per - 1) / per
		if p.sources > maxLoopbackSources {
			return p, fmt.Errorf("-connections %d needs %d client source addresses of %d ports each (half of ip_local_port_range %d-%d, less a tenth), "+
				"%d more than 127/8 has; at most %d connections fit",
				n, p.sources, per, lim.portLow, lim.portHigh, p.sources-maxLoopbackSources, maxLoopbackSources*per)
		}
	}
	return p, nil
}

// spreadNote says, for the progress output, why and over which addresses
// the client spreads its connections; "" when it does not.
func (p idlePlan) spreadNote() string {
	if p.sources <= 1 {
		return ""
	}
	srcs := loopbackSources(p.sources)
	return fmt.Sprintf("idle: the client spreads %d connections over %d source addresses, %s to %s, %d at most from each "+
		"(half of ip_local_port_range %d-%d, which connect() searches first, less a tenth)",
		p.conns, p.sources, srcs[0], srcs[len(srcs)-1], p.limits.portsPerSource(), p.limits.portLow, p.limits.portHigh)
}

// checkIdleLimits plans every idle config of plan against lim before
// anything runs: the first that does not fit is the error, and the
// configs that spread their connections say so on w.
func checkIdleLimits(w io.Writer, plan []config, lim idleLimits) error {
	seen := map[int]bool{}
	for _, c := range plan {
		if c.workload != workloadIdle || seen[c.connections] {
			continue
		}
		seen[c.connections] = true
		p, err := planIdle(c.connections, lim)
		if err != nil {
			return err
		}
		if note := p.spreadNote(); note != "" {
			fmt.Fprintln(w, note)
		}
	}
	return nil
}

// checkChildFiles raises the soft RLIMIT_NOFILE of an idle child and
// checks it against what n connections need, so that a child that cannot
// hold them says so at once.
func checkChildFiles(n int) error {
	cur, _, err := raiseFileLimit()
	if err != nil {
		return nil // another OS: nothing to check against
	}
	if need := filesNeeded(n); cur < need {
		return fmt.Errorf("%d connections need about %d open files, %d more than RLIMIT_NOFILE allows this process (%d)", n, need, need-cur, cur)
	}
	return nil
}
