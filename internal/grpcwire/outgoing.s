// The linker supplies outgoingRaw (outgoing.go); this file lets the
// compiler accept a Go declaration without a body.
