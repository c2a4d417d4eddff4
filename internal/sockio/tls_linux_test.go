//go:build linux && !leangrpcportable

package sockio

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/leangrpc/leangrpc/internal/bufpool"
)

// peerConn is the raw conn under the test's TLS peer: it can hold what the
// peer writes and send it in one write (two records at once), or send each
// write in two halves with a pause between (a record split across reads).
type peerConn struct {
	net.Conn
	mu    sync.Mutex
	hold  bool
	held  []byte
	split time.Duration
}

func (p *peerConn) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold {
		p.held = append(p.held, b...)
		return len(b), nil
	}
	if p.split > 0 && len(b) > 1 {
		n, err := p.Conn.Write(b[:len(b)/2])
		if err != nil {
			return n, err
		}
		time.Sleep(p.split)
		m, err := p.Conn.Write(b[len(b)/2:])
		return n + m, err
	}
	return p.Conn.Write(b)
}

// release sends what was held in one write.
func (p *peerConn) release() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = false
	_, err := p.Conn.Write(p.held)
	p.held = nil
	return err
}

var testCert = sync.OnceValues(func() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "leangrpc.test"},
		DNSNames:     []string{"leangrpc.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
})

// tlsPair returns a TLSConn (the client side, over ForTLSHandshake's
// conn) and its peer, a plain tls.Conn over a peerConn, after the
// handshake.
func tlsPair(t *testing.T, cache tls.ClientSessionCache) (*TLSConn, *tls.Conn, *peerConn) {
	t.Helper()
	return tlsPairVersion(t, cache, 0)
}

// tlsPairVersion is tlsPair with the client's highest TLS version (0:
// crypto/tls's default, TLS 1.3).
func tlsPairVersion(t *testing.T, cache tls.ClientSessionCache, maxVersion uint16) (*TLSConn, *tls.Conn, *peerConn) {
	t.Helper()
	cert, err := testCert()
	if err != nil {
		t.Fatal(err)
	}
	client, server := tcpPair(t)
	pc := &peerConn{Conn: server}
	srv := tls.Server(pc, &tls.Config{Certificates: []tls.Certificate{cert}})
	hs := ForTLSHandshake(client)
	if _, ok := hs.(*recordConn); !ok {
		t.Fatalf("ForTLSHandshake(%T) = %T, want the record conn", client, hs)
	}
	cli := tls.Client(hs, &tls.Config{InsecureSkipVerify: true, ServerName: "leangrpc.test", ClientSessionCache: cache, MaxVersion: maxVersion})
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	tc, ok := SecuredTLS(hs, cli).(*TLSConn)
	if !ok {
		t.Fatal("SecuredTLS did not return a *TLSConn for a tls.Conn over its conn")
	}
	if w := Wrap(tc, true); w != net.Conn(tc) {
		t.Fatalf("Wrap(*TLSConn) = %T, want it as it is", w)
	}
	t.Cleanup(func() { tc.Close(); srv.Close() })
	return tc, srv, pc
}

// readWithin reads until want bytes came, through ReadReadyWithin with a
// short bound (which runs out mid-record when the peer splits them).
func readWithin(t *testing.T, c *TLSConn, pool *bufpool.Pool, want int) []byte {
	t.Helper()
	var got []byte
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < want {
		if time.Now().After(deadline) {
			t.Fatalf("read %d bytes of %d", len(got), want)
		}
		b, err := c.ReadReadyWithin(pool, 0, 2*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if b != nil {
			got = append(got, b.Bytes()...)
			b.Free()
		}
	}
	return got
}

// atBoundary checks that nothing is buffered above the socket: the record
// conn is between records and the last read left no plaintext.
func atBoundary(t *testing.T, c *TLSConn) {
	t.Helper()
	if c.rec.hdrN != 0 || c.rec.left != 0 || c.pending {
		t.Fatalf("not at a record boundary: header %d bytes in, %d body bytes left, pending %v", c.rec.hdrN, c.rec.left, c.pending)
	}
}

// TestTLSPostHandshakeMessages: TLS 1.3 session tickets, records without
// application data, are consumed by a try read that then finds nothing
// and holds nothing; the connection then waits in the idle poller and
// wakes for the next application record.
func TestTLSPostHandshakeMessages(t *testing.T) {
	cache := tls.NewLRUClientSessionCache(4)
	c, srv, _ := tlsPair(t, cache)
	pool := bufpool.New(nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := c.TryReadReady(pool, 0)
		if b != nil || err != nil {
			t.Fatalf("TryReadReady with only tickets sent = %v, %v; want nil, nil", b, err)
		}
		if s, ok := cache.Get("leangrpc.test"); ok && s != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no session ticket was read")
		}
		time.Sleep(time.Millisecond)
	}
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("%d buffers out after reads that found no plaintext", n)
	}
	atBoundary(t, c)
	fired := make(chan struct{})
	if err := c.OnReadable(func() { close(fired) }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
		t.Fatal("OnReadable fired with nothing sent")
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := srv.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("OnReadable did not fire for an application record")
	}
	b, err := c.ReadReady(pool, 0)
	if err != nil || string(b.Bytes()) != "hello" {
		t.Fatalf("ReadReady = %q, %v; want hello", b.Bytes(), err)
	}
	b.Free()
}

// TestTLSRecordSplitAcrossReads: records that arrive in pieces, with a
// pause longer than ReadReadyWithin's bound between them, read whole.
func TestTLSRecordSplitAcrossReads(t *testing.T) {
	c, srv, pc := tlsPair(t, nil)
	pool := bufpool.New(nil)
	pc.mu.Lock()
	pc.split = 20 * time.Millisecond
	pc.mu.Unlock()
	msg := bytes.Repeat([]byte("split record "), 3000) // three records
	go srv.Write(msg)
	if got := readWithin(t, c, pool, len(msg)); !bytes.Equal(got, msg) {
		t.Fatalf("read %d bytes, not the %d sent", len(got), len(msg))
	}
	atBoundary(t, c)
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("%d buffers out", n)
	}
}

// TestTLSTwoRecordsAtOnce: of two records that arrive in one segment, a
// read takes the first only, leaving the second in the socket, where the
// next read (or the idle poller) finds it.
func TestTLSTwoRecordsAtOnce(t *testing.T) {
	c, srv, pc := tlsPair(t, nil)
	pool := bufpool.New(nil)
	pc.mu.Lock()
	pc.hold = true
	pc.mu.Unlock()
	srv.Write([]byte("one"))
	srv.Write([]byte("two"))
	if err := pc.release(); err != nil {
		t.Fatal(err)
	}
	b, err := c.ReadReady(pool, 0)
	if err != nil || string(b.Bytes()) != "one" {
		t.Fatalf("first ReadReady = %q, %v; want one", b.Bytes(), err)
	}
	b.Free()
	atBoundary(t, c)
	fired := make(chan struct{})
	if err := c.OnReadable(func() { close(fired) }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("OnReadable did not fire for the second record, in the socket")
	}
	b, err = c.TryReadReady(pool, 0)
	if err != nil || b == nil || string(b.Bytes()) != "two" {
		t.Fatalf("second read = %v, %v; want two", b, err)
	}
	b.Free()
	if b, err := c.TryReadReady(pool, 0); b != nil || err != nil {
		t.Fatalf("third read = %v, %v; want nil, nil", b, err)
	}
}

// TestTLSShortReadLeavesPlaintext: a Read shorter than a record's
// plaintext leaves the rest in the tls.Conn, which the socket does not
// show: OnReadable fires at once and the next read takes it.
func TestTLSShortReadLeavesPlaintext(t *testing.T) {
	c, srv, _ := tlsPair(t, nil)
	pool := bufpool.New(nil)
	msg := bytes.Repeat([]byte{7}, tlsReadSize)
	go srv.Write(msg)
	p := make([]byte, 100)
	if n, err := c.Read(p); err != nil || n != len(p) {
		t.Fatalf("Read = %d, %v", n, err)
	}
	fired := make(chan struct{})
	if err := c.OnReadable(func() { close(fired) }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("OnReadable did not fire with plaintext left in the tls.Conn")
	}
	got := readWithin(t, c, pool, len(msg)-len(p))
	if len(got) != len(msg)-len(p) {
		t.Fatalf("read %d bytes, want %d", len(got), len(msg)-len(p))
	}
}

// TestTLSIdleHoldsNothing: idle TLS conns waiting in the idle poller hold
// no goroutine and no buffer; Close runs the armed callback.
func TestTLSIdleHoldsNothing(t *testing.T) {
	const n = 20
	if err := StartIdlePoller(); err != nil {
		t.Fatal(err)
	}
	pool := bufpool.New(nil)
	type pair struct {
		c     *TLSConn
		srv   *tls.Conn
		fired chan struct{}
	}
	pairs := make([]pair, n)
	for i := range pairs {
		c, srv, _ := tlsPair(t, nil)
		pairs[i] = pair{c, srv, make(chan struct{})}
		go srv.Write([]byte("ping"))
		if got := readWithin(t, c, pool, 4); string(got) != "ping" {
			t.Fatalf("read %q", got)
		}
	}
	runtime.GC()
	base := runtime.NumGoroutine()
	for _, p := range pairs {
		// Drain what came after the data (tickets), then wait.
		for {
			b, err := p.c.TryReadReady(pool, 0)
			if err != nil {
				t.Fatal(err)
			}
			if b == nil {
				break
			}
			b.Free()
		}
		if err := p.c.OnReadable(func() { close(p.fired) }); err != nil {
			t.Fatal(err)
		}
	}
	if got := runtime.NumGoroutine(); got > base {
		t.Fatalf("%d goroutines with %d conns idle, %d before arming", got, n, base)
	}
	if out := pool.Outstanding(); out != 0 {
		t.Fatalf("%d buffers out with every conn idle", out)
	}
	for _, p := range pairs {
		if !p.c.AwaitsReadable() {
			t.Fatal("an idle conn does not await readability")
		}
	}
	for _, p := range pairs {
		p.c.Close()
		select {
		case <-p.fired:
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not run the armed callback")
		}
		if _, err := p.c.ReadReady(pool, 0); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadReady after Close = %v, want net.ErrClosed", err)
		}
	}
}

// TestSecuredTLSOtherConns: a handshake result that is not a tls.Conn over
// the record conn gets no TLSConn, and the record conn reads as the raw
// conn does from then on.
func TestSecuredTLSOtherConns(t *testing.T) {
	client, server := tcpPair(t)
	hs := ForTLSHandshake(client)
	if got := SecuredTLS(hs, hs); got != nil {
		t.Fatalf("SecuredTLS of the record conn itself = %T, want nil", got)
	}
	if _, err := server.Write([]byte("abcdefgh")); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 8)
	n := 0
	for n < len(p) {
		m, err := hs.Read(p[n:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && m < 6 && m == recordHeaderLen {
			t.Fatalf("read %d bytes: still reading record headers", m)
		}
		n += m
	}
	if string(p) != "abcdefgh" {
		t.Fatalf("read %q", p)
	}
	if SecuredTLS(client, client) != nil {
		t.Fatal("SecuredTLS of a conn not from ForTLSHandshake is not nil")
	}
}

// TestTLS12: TLS 1.2 records (explicit nonces, no inner content type) read
// whole and leave the conn at a record boundary, in both directions.
func TestTLS12(t *testing.T) {
	c, srv, _ := tlsPairVersion(t, nil, tls.VersionTLS12)
	if v := c.TLS().ConnectionState().Version; v != tls.VersionTLS12 {
		t.Fatalf("version %x, want TLS 1.2", v)
	}
	pool := bufpool.New(nil)
	msg := bytes.Repeat([]byte("tls12 "), 10000)
	go srv.Write(msg)
	if got := readWithin(t, c, pool, len(msg)); !bytes.Equal(got, msg) {
		t.Fatalf("read %d bytes, not the %d sent", len(got), len(msg))
	}
	atBoundary(t, c)
	go c.WriteVec([][]byte{[]byte("back"), []byte("wards")})
	p := make([]byte, 9)
	for n := 0; n < len(p); {
		m, err := srv.Read(p[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
	if string(p) != "backwards" {
		t.Fatalf("peer read %q", p)
	}
}

// A TLS connection holds its recordConn for its life: it stays within the
// 128-byte size class.
func TestRecordConnSize(t *testing.T) {
	if n := unsafe.Sizeof(recordConn{}); n > 128 {
		t.Fatalf("recordConn is %d bytes, want at most 128", n)
	}
}
