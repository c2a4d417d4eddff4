package grpcwire

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// maxTimeoutDigits is the limit PROTOCOL-HTTP2 sets on the value of
// grpc-timeout ("TimeoutValue → {positive integer as ASCII string of at most
// 8 digits}").
const maxTimeoutValue = 99999999

var timeoutUnits = [...]struct {
	d    time.Duration
	unit byte
}{
	{time.Nanosecond, 'n'},
	{time.Microsecond, 'u'},
	{time.Millisecond, 'm'},
	{time.Second, 'S'},
	{time.Minute, 'M'},
	{time.Hour, 'H'},
}

// EncodeTimeout returns the grpc-timeout value for d: the finest unit in
// which d, rounded up, fits in 8 digits. A non-positive d encodes as "0n".
func EncodeTimeout(d time.Duration) string {
	var b [10]byte
	return string(AppendTimeout(b[:0], d))
}

// AppendTimeout appends EncodeTimeout(d) to dst.
func AppendTimeout(dst []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(dst, '0', 'n')
	}
	for _, u := range timeoutUnits {
		v := int64(d / u.d)
		if d%u.d != 0 {
			v++
		}
		if v <= maxTimeoutValue || u.unit == 'H' {
			dst = strconv.AppendInt(dst, v, 10)
			return append(dst, u.unit)
		}
	}
	panic("unreachable")
}

var (
	errTimeoutShort = errors.New("timeout string is too short")
	errTimeoutLong  = errors.New("timeout string is too long")
	errTimeoutUnit  = errors.New("timeout unit is not recognized")
	errTimeoutValue = errors.New("timeout value is not a decimal number")
)

// DecodeTimeout parses a grpc-timeout value: 1 to 8 ASCII digits followed by
// one of H M S m u n. Values too large for a time.Duration saturate.
func DecodeTimeout(s string) (time.Duration, error) {
	if len(s) < 2 {
		return 0, errTimeoutShort
	}
	if len(s) > 9 {
		return 0, errTimeoutLong
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, errTimeoutUnit
	}
	var v int64
	for i := 0; i < len(s)-1; i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, errTimeoutValue
		}
		v = v*10 + int64(c-'0')
	}
	if v > math.MaxInt64/int64(unit) {
		return time.Duration(math.MaxInt64), nil
	}
	return time.Duration(v) * unit, nil
}
