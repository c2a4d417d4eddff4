//go:build leangrpcdebug

package bufpool

// debug turns on poisoning of freed memory and panics on double free.
const debug = true

func poison(b []byte) {
	for i := range b {
		b[i] = 0xdb
	}
}
