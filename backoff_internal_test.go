package leangrpc

import (
	"testing"
	"time"
)

func TestBackoffDelays(t *testing.T) {
	b := defaultBackoff
	if d := b.delay(0); d != time.Second {
		t.Errorf("first delay %v, want 1s", d)
	}
	// Without jitter the sequence is 1s * 1.6^n capped at 120s.
	b.jitter = 0
	want := []time.Duration{time.Second, 1600 * time.Millisecond, 2560 * time.Millisecond, 4096 * time.Millisecond}
	for i, w := range want {
		if d := b.delay(i); d < w-time.Millisecond || d > w+time.Millisecond {
			t.Errorf("delay(%d) = %v, want %v", i, d, w)
		}
	}
	if d := b.delay(100); d != 120*time.Second {
		t.Errorf("delay(100) = %v, want the 120s cap", d)
	}
	// With jitter every delay stays within ±20%.
	b = defaultBackoff
	for i := 0; i < 200; i++ {
		d := b.delay(3)
		if d < 3276*time.Millisecond || d > 4916*time.Millisecond {
			t.Fatalf("jittered delay(3) = %v outside 4.096s ± 20%%", d)
		}
	}
}
