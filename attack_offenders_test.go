package leangrpc_test

import (
	"errors"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/leangrpc/leangrpc"
	"github.com/leangrpc/leangrpc/internal/h2frame"
	"github.com/leangrpc/leangrpc/internal/h2test"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// served dials addr from local (nil: any address), greets, and reports
// whether the server answered with its SETTINGS (true) or closed the
// connection unanswered (false). A served connection is returned open.
func served(t *testing.T, addr string, local net.Addr) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: local, Timeout: attackWait}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil, false // reset as soon as it was accepted
	}
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(attackWait))
	b := []byte(h2test.ClientPreface)
	b = h2test.AppendFrame(b, h2frame.TypeSettings, 0, 0, nil)
	c.Write(b) // a refused connection may fail the write; the read tells
	// The server's SETTINGS, whole, so that the caller reads from a
	// frame boundary.
	var hdr [9]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		c.Close()
		return nil, false
	}
	n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
		t.Fatalf("the server's SETTINGS were cut: %v", err)
	}
	c.SetDeadline(time.Time{})
	return c, true
}

// TestAttackRepeatOffender: an attacker that reconnects after each GOAWAY
// ENHANCE_YOUR_CALM is served fewer and fewer connections (offenders.go),
// while a legitimate connection from the same address, up before the
// attack, keeps working.
func TestAttackRepeatOffender(t *testing.T) {
	const maxInterval = 200 * time.Millisecond
	tg := attackTarget(t, leangrpc.OffenderBackoff(maxInterval))
	cc, err := leangrpc.NewClient(tg.addr, leangrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	if _, err := client.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 10}); err != nil {
		t.Fatal(err)
	}

	burst := rapidResets(2000) // enough to earn GOAWAY ENHANCE_YOUR_CALM
	start := time.Now()
	var offenses, refused int
	for time.Since(start) < time.Second {
		c, ok := served(t, tg.addr, nil)
		if !ok {
			refused++
			continue
		}
		p := h2test.NewPeer(t, c, h2test.ClientRole)
		p.Timeout = attackWait
		done := flood(c, burst)
		wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm)
		<-done
		c.Close()
		offenses++
	}
	// The gaps double from 1 ms per offense to maxInterval: about ten
	// served in the first half second, then two a second (the rest of the
	// second's budget; the loop's own time only lowers the count).
	if maxServed := 16; offenses > maxServed {
		t.Errorf("an attacker reconnecting for a second was served %d connections, want at most %d", offenses, maxServed)
	}
	if refused == 0 {
		t.Errorf("no connection of a repeat offender was refused (%d served)", offenses)
	}
	t.Logf("a second of reconnecting: %d connections served, %d refused at accept", offenses, refused)

	if _, err := client.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 10}); err != nil {
		t.Errorf("a connection up before the attack failed: %v", err)
	}
	if runtime.GOOS == "linux" {
		// Linux routes all of 127/8 to the loopback: another address
		// is not throttled.
		other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
		if c, ok := served(t, tg.addr, other); !ok {
			t.Error("a connection from another address was refused")
		} else {
			c.Close()
		}
	}
	// The address is served again once the gap has passed.
	time.Sleep(maxInterval + 50*time.Millisecond)
	if c, ok := served(t, tg.addr, nil); !ok {
		t.Errorf("the offender's address was still refused %v after its last connection", maxInterval)
	} else {
		c.Close()
	}
}

// TestOffenderBackoffOff: OffenderBackoff(0) serves every connection of
// an address that keeps earning GOAWAY ENHANCE_YOUR_CALM.
func TestOffenderBackoffOff(t *testing.T) {
	tg := attackTarget(t, leangrpc.OffenderBackoff(0))
	burst := rapidResets(2000) // enough to earn GOAWAY ENHANCE_YOUR_CALM
	for range 20 {
		c, ok := served(t, tg.addr, nil)
		if !ok {
			t.Fatal("a connection was refused with the throttle off")
		}
		p := h2test.NewPeer(t, c, h2test.ClientRole)
		p.Timeout = attackWait
		done := flood(c, burst)
		wantGoAway(t, p, h2frame.ErrCodeEnhanceYourCalm)
		<-done
		c.Close()
	}
}
