package grpcwire

import (
	"math"
	"testing"
	"time"
)

func TestEncodeTimeout(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0n"},
		{0, "0n"},
		{1, "1n"},
		{99999999, "99999999n"},
		{100000000, "100000u"},
		{100000001, "100001u"}, // rounds up
		{time.Second, "1000000u"},
		{100 * time.Second, "100000m"},
		{99999999 * time.Millisecond, "99999999m"},
		{100000 * time.Second, "100000S"},
		{99999999 * time.Second, "99999999S"},
		{100000000 * time.Second, "1666667M"},
		{99999999 * time.Minute, "99999999M"},
		{100000000 * time.Minute, "1666667H"},
		{time.Duration(math.MaxInt64), "2562048H"},
	}
	for _, tc := range tests {
		if got := EncodeTimeout(tc.d); got != tc.want {
			t.Errorf("EncodeTimeout(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestDecodeTimeout(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"1H", time.Hour, false},
		{"2M", 2 * time.Minute, false},
		{"3S", 3 * time.Second, false},
		{"4m", 4 * time.Millisecond, false},
		{"5u", 5 * time.Microsecond, false},
		{"6n", 6, false},
		{"0n", 0, false},
		{"99999999S", 99999999 * time.Second, false},
		{"99999999H", time.Duration(math.MaxInt64), false}, // saturates
		{"", 0, true},
		{"S", 0, true},
		{"1", 0, true},
		{"123456789S", 0, true}, // nine digits
		{"1x", 0, true},
		{"-1S", 0, true},
		{"+1S", 0, true},
		{"1 S", 0, true},
		{"1.5S", 0, true},
	}
	for _, tc := range tests {
		got, err := DecodeTimeout(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("DecodeTimeout(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && got != tc.want {
			t.Errorf("DecodeTimeout(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestTimeoutRoundTripNeverShortens(t *testing.T) {
	for _, d := range []time.Duration{1, 999, 123456789, 3 * time.Second, 7*time.Hour + 3, 1<<62 + 12345} {
		s := EncodeTimeout(d)
		if len(s) > 9 {
			t.Fatalf("EncodeTimeout(%v) = %q: more than 8 digits", d, s)
		}
		got, err := DecodeTimeout(s)
		if err != nil {
			t.Fatalf("DecodeTimeout(EncodeTimeout(%v)=%q): %v", d, s, err)
		}
		if got < d {
			t.Errorf("round trip of %v gave %v (%q): shorter", d, got, s)
		}
	}
}
