package leangrpc

// Options grpc-go has that leangrpc accepts so that code converted from
// grpc-go compiles and runs, but that have nothing to set in leangrpc's
// design. Each says why; OPTIONS.md lists every grpc-go option and what
// leangrpc does with it.

// WriteBufferSize is accepted and has no effect. grpc-go batches writes in
// a per-connection buffer of this size (32 KiB). leangrpc keeps no write
// buffer per connection: whoever finds the write role free writes every
// queued frame in one vectored write from a batch taken from a pool for
// that flush, with large DATA payloads sent from the message's own buffer.
func WriteBufferSize(int) ServerOption { return serverOptionFunc(func(*serverOptions) {}) }

// ReadBufferSize is accepted and has no effect. grpc-go reads through a
// per-connection buffer of this size (32 KiB). leangrpc reads up to 64 KiB
// at a time into a pooled buffer it holds only while bytes are unparsed
// (ReadBufferPooling), and reads the rest of a large DATA frame straight
// into the message's buffer.
func ReadBufferSize(int) ServerOption { return serverOptionFunc(func(*serverOptions) {}) }

// SharedWriteBuffer is accepted and has no effect: leangrpc's connections
// never keep a write buffer between flushes (see WriteBufferSize), which
// is what this option asks grpc-go for.
//
// Deprecated: grpc-go deprecates it too (its shared write buffer is the
// default).
func SharedWriteBuffer(bool) ServerOption { return serverOptionFunc(func(*serverOptions) {}) }

// WithWriteBufferSize is accepted and has no effect; see WriteBufferSize.
func WithWriteBufferSize(int) DialOption { return dialOptionFunc(func(*dialOptions) {}) }

// WithReadBufferSize is accepted and has no effect; see ReadBufferSize.
func WithReadBufferSize(int) DialOption { return dialOptionFunc(func(*dialOptions) {}) }

// WithSharedWriteBuffer is accepted and has no effect; see
// SharedWriteBuffer.
//
// Deprecated: grpc-go deprecates it too (its shared write buffer is the
// default).
func WithSharedWriteBuffer(bool) DialOption { return dialOptionFunc(func(*dialOptions) {}) }

// WithNoProxy is accepted and has no effect: leangrpc never goes through
// an HTTP CONNECT proxy (grpc-go uses one from the environment unless told
// not to), so every connection is already direct.
func WithNoProxy() DialOption { return dialOptionFunc(func(*dialOptions) {}) }

// WithLocalDNSResolution is accepted and has no effect: leangrpc always
// resolves the target through its resolver (it never hands a name to a
// proxy), which is what this option asks grpc-go for.
func WithLocalDNSResolution() DialOption { return dialOptionFunc(func(*dialOptions) {}) }
