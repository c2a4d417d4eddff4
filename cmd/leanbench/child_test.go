package main

import "testing"

func TestCrashSummary(t *testing.T) {
	dump := `some log line
panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x17c pc=0x87be01]

goroutine 244 [running]:
internal/sync.(*Mutex).Lock(...)
	/usr/local/go/src/internal/sync/mutex.go:63
sync.(*Mutex).Lock(...)
	/usr/local/go/src/sync/mutex.go:46
github.com/leangrpc/leangrpc/internal/h2conn.(*Stream).reset(0x117911f1eb40, 0x8)
	/work/main/internal/h2conn/stream.go:441 +0x41
created by context.(*afterFuncCtx).cancel.func1 in goroutine 40
	/usr/local/go/src/context/context.go:358 +0x1b

goroutine 1 [chan receive]:
main.main()
`
	want := "panic: runtime error: invalid memory address or nil pointer dereference (in internal/h2conn.(*Stream).reset)"
	if got := crashSummary(dump); got != want {
		t.Errorf("crashSummary = %q, want %q", got, want)
	}
	stdOnly := "fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [chan receive]:\nmain.main()\n\t/x/main.go:5 +0x1\n"
	if got := crashSummary(stdOnly); got != "fatal error: all goroutines are asleep - deadlock! (in main.main)" {
		t.Errorf("crashSummary = %q", got)
	}
	if got := crashSummary("exit status 1\n"); got != "" {
		t.Errorf("crashSummary of a non-crash = %q, want empty", got)
	}
}
