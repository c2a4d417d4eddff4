//go:build !leangrpcdebug

package bufpool

// debug turns on poisoning of freed memory and panics on double free.
const debug = false

func poison([]byte) {}
