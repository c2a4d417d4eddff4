package leangrpc

import (
	"time"

	"google.golang.org/grpc/keepalive"
)

// KeepaliveParamsUnfloored is KeepaliveParams without grpc-go's 1 s floor
// on the ping Time, so that tests of the server's keepalive timers can run
// in a fraction of a second.
var KeepaliveParamsUnfloored = keepaliveParams

// WithKeepaliveParamsUnfloored is WithKeepaliveParams without grpc-go's
// 10 s floor on the ping Time, so that a test can make a server answer a
// client's pings with GOAWAY too_many_pings in a fraction of a second.
func WithKeepaliveParamsUnfloored(kp keepalive.ClientParameters) DialOption {
	return dialOptionFunc(func(o *dialOptions) { o.kp = kp })
}

// KeepaliveTimeOf is the keepalive time cc's next connection will use.
func KeepaliveTimeOf(cc *ClientConn) time.Duration { return cc.h2cfg.Load().KeepaliveTime }

// HandlerWorkers returns the number of the server's handler workers, idle
// or running a call.
func HandlerWorkers(s *Server) int {
	p := s.workers
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// SetWorkerIdleTimeout sets how long the server's handler workers wait for
// a call before they exit; a test sets it before the server's first call.
func SetWorkerIdleTimeout(s *Server, d time.Duration) { s.workers.idleTimeout = d }

// MemoryInUse returns the bytes charged to the server's memory budget (the
// process-wide one without MemoryBudget).
func MemoryInUse(s *Server) int64 { return s.h2cfg.Budget.Used() }

// MemoryMaxConn returns the bytes held by the server's connection that
// holds the most, and how many connections its budget lists.
func MemoryMaxConn(s *Server) (int64, int) { return s.h2cfg.Budget.MaxHeld() }
