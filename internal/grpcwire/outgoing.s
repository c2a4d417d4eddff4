// The linker supplies outgoingRaw (outgoing.go): this file lets the
// compiler accept its declaration without a body.
