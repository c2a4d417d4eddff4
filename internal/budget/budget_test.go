package budget

import (
	"math"
	"sync"
	"testing"
	"time"
)

// TestLedgerReservesInGranules: a ledger moves its account in granules,
// keeps one spare while busy so that small charges touch only itself, and
// gives everything back on Trim and Close.
func TestLedgerReservesInGranules(t *testing.T) {
	a := New(64 << 20)
	l := a.NewLedger()
	l.Charge(100)
	if got := a.Used(); got != granule {
		t.Fatalf("100 bytes held: account at %d, want one granule", got)
	}
	for range 1000 { // calls of a busy connection
		l.Charge(3000)
		l.Release(3000)
	}
	if got := a.Used(); got != granule {
		t.Fatalf("after small calls: account at %d, want one granule", got)
	}
	l.Charge(3*granule + 1 - 100)
	if got := a.Used(); got != 4*granule {
		t.Fatalf("3 granules + 1 byte held: account at %d, want 4 granules", got)
	}
	l.Release(3*granule + 1)
	if got, held := a.Used(), l.Held(); got != granule || held != 0 {
		t.Fatalf("all freed: account at %d (want the spare granule), ledger %d", got, held)
	}
	l.Trim()
	if got := a.Used(); got != 0 {
		t.Fatalf("after Trim: account at %d, want 0", got)
	}
	l.Charge(10)
	l.Close()
	if got := a.Used(); got != granule {
		t.Fatalf("closed holding 10 bytes: account at %d, want one granule", got)
	}
	l.Release(10)
	if got := a.Used(); got != 0 {
		t.Fatalf("closed and freed: account at %d, want 0", got)
	}
	if _, n := a.MaxHeld(); n != 0 {
		t.Fatalf("%d ledgers still listed", n)
	}
}

// TestLedgerConcurrentCharges: goroutines charging and freeing one ledger
// at once leave the account covering exactly what is held, and at zero
// once everything is freed and the ledger closed.
func TestLedgerConcurrentCharges(t *testing.T) {
	a := New(1 << 30)
	l := a.NewLedger()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				n := int64((g*7919+i*104729)%(5*granule) + 1)
				l.Charge(n)
				if a.Used() < 0 {
					t.Error("account below zero")
				}
				l.Release(n)
			}
		}()
	}
	wg.Wait()
	if got := a.Used(); got > granule {
		t.Errorf("nothing held: account at %d, want at most the spare granule", got)
	}
	l.Close()
	if got := a.Used(); got != 0 {
		t.Errorf("closed: account at %d, want 0", got)
	}
}

// recorder is a Shedder that reports its Shed.
type recorder struct{ shed chan string }

func (r recorder) Shed() { r.shed <- "" }

// TestShedBiggestFirst: a charge past the limit sheds the ledger holding
// the most, and only as many as it takes for the rest to fit.
func TestShedBiggestFirst(t *testing.T) {
	a := New(1 << 20)
	names := []string{"small", "big", "middle"}
	sizes := []int64{100 << 10, 600 << 10, 400 << 10} // 1.1 MiB together
	shed := make(chan string, 3)
	for i, name := range names {
		l := a.NewLedger()
		r := recorder{make(chan string, 1)}
		l.Register(r)
		go func() {
			<-r.shed
			shed <- name
		}()
		l.Charge(sizes[i])
		defer func() { l.Release(sizes[i]); l.Close() }()
	}
	select {
	case name := <-shed:
		if name != "big" {
			t.Fatalf("shed %q first, want the biggest", name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("over the limit, nothing shed")
	}
	select {
	case name := <-shed:
		t.Fatalf("shed %q too: the rest fits", name)
	case <-time.After(50 * time.Millisecond):
	}
	if most, n := a.MaxHeld(); most != 600<<10 || n != 3 {
		t.Errorf("MaxHeld %d of %d ledgers, want %d of 3", most, n, 600<<10)
	}
}

// TestRefusesStreamsAboveShare: under pressure a connection holding at
// least the mean has new streams refused, one holding nothing does not;
// below the soft level nothing is refused.
func TestRefusesStreamsAboveShare(t *testing.T) {
	a := New(4 << 20)
	var ls []*Ledger
	for range 4 {
		l := a.NewLedger()
		l.Register(recorder{make(chan string, 1)})
		ls = append(ls, l)
	}
	ls[0].Charge(1 << 20)
	if ls[0].RefusesStreams() || a.RefusesConns() {
		t.Fatal("refused below the soft level")
	}
	ls[1].Charge(2 << 20) // 3 MiB: at the soft level
	if a.Level() != LevelSoft || !a.RefusesConns() {
		t.Fatalf("level %v at %d bytes, want soft", a.Level(), a.Used())
	}
	if !ls[1].RefusesStreams() || !ls[0].RefusesStreams() {
		t.Error("connections holding more than the mean not refused")
	}
	if ls[2].RefusesStreams() {
		t.Error("a connection holding nothing refused")
	}
	if ls[1].OverLimit() {
		t.Error("over the limit at the soft level")
	}
	ls[3].Charge(1 << 20) // 4 MiB: at the limit
	if !ls[1].OverLimit() || ls[2].OverLimit() {
		t.Errorf("at the limit: OverLimit %v for the biggest, %v for an empty one; want true, false", ls[1].OverLimit(), ls[2].OverLimit())
	}
	for i, l := range ls {
		l.Release(l.Held())
		l.Close()
		if l.RefusesStreams() {
			t.Errorf("ledger %d refused holding nothing", i)
		}
	}
	if a.Used() != 0 || a.Level() != LevelNone {
		t.Errorf("all closed: %d bytes, level %v", a.Used(), a.Level())
	}
}

// TestTryChargeShare: under pressure growth past a connection's share is
// refused and leaves nothing charged; growth within it passes.
func TestTryChargeShare(t *testing.T) {
	a := New(4 << 20)
	flood := a.NewLedger()
	flood.Charge(3 << 20)
	l := a.NewLedger()
	if !l.TryCharge(32<<10, 64<<10) {
		t.Error("growth within the share refused")
	}
	before := a.Used()
	if l.TryCharge(64<<10, 64<<10) {
		t.Error("growth past the share accepted under pressure")
	}
	if l.Held() != 32<<10 || a.Used() > before+granule { // the spare granule may stay
		t.Errorf("a refused charge left %d held, account %d (was %d)", l.Held(), a.Used(), before)
	}
	flood.Release(3 << 20)
	if !l.TryCharge(64<<10, 64<<10) {
		t.Error("growth past the share refused without pressure")
	}
	var nl *Ledger
	if !nl.TryCharge(1<<30, 0) || nl.RefusesStreams() || nl.Held() != 0 {
		t.Error("a nil ledger refused or counted")
	}
}

func TestDefaultLimit(t *testing.T) {
	for _, c := range []struct{ mem, want int64 }{
		{math.MaxInt64, DefaultLimit},
		{8 << 30, DefaultLimit},
		{1 << 30, 256 << 20},
	} {
		if got := defaultLimit(c.mem); got != c.want {
			t.Errorf("GOMEMLIMIT %d: default budget %d, want %d", c.mem, got, c.want)
		}
	}
	if New(1).Limit() != MinLimit {
		t.Error("a budget below MinLimit")
	}
}

// Header-block bytes past a connection's share count against the
// account's cap whatever the pressure, come back when released, and a
// server may raise the cap for the lists it is configured to take.
func TestChargeBlockCap(t *testing.T) {
	const share = 64 << 10
	a := New(1 << 30) // cap: 2 MiB
	l1, l2 := a.NewLedger(), a.NewLedger()
	if !l1.ChargeBlock(0, 3<<19, share) {
		t.Fatal("a 1.5 MiB block refused on an idle account")
	}
	if got, want := a.Blocks(), int64(3<<19-share); got != want {
		t.Errorf("blocks past the share %d, want %d", got, want)
	}
	if l2.ChargeBlock(0, 1<<20, share) {
		t.Error("a second block taking the bytes past the shares over 2 MiB was charged")
	}
	if !l2.ChargeBlock(0, share, share) {
		t.Error("a block within its share was refused")
	}
	l1.ReleaseBlock(3<<19, share)
	l2.ReleaseBlock(share, share)
	if a.Blocks() != 0 {
		t.Errorf("blocks past the share %d after every release, want 0", a.Blocks())
	}
	a.AllowBlocks(16<<20 + 16<<10)
	if !l1.ChargeBlock(0, 16<<20, share) {
		t.Error("a 16 MiB block refused after AllowBlocks(16 MiB)")
	}
	l1.ReleaseBlock(16<<20, share)
	l1.Close()
	l2.Close()
	if a.Used() != 0 {
		t.Errorf("account at %d after the ledgers closed, want 0", a.Used())
	}
}
