package leangrpc

import "testing"

// TestDialNetwork: addresses from resolvers other than unix's are dialed
// as grpc-go's default dialer reads them (its ParseDialTarget).
func TestDialNetwork(t *testing.T) {
	tests := []struct{ in, network, addr string }{
		{"127.0.0.1:50051", "tcp", "127.0.0.1:50051"},
		{"[::1]:50051", "tcp", "[::1]:50051"},
		{"localhost:50051", "tcp", "localhost:50051"},
		{"unix:rel/s.sock", "unix", "rel/s.sock"},
		{"unix:/abs/s.sock", "unix", "/abs/s.sock"},
		{"unix:///abs/s.sock", "unix", "/abs/s.sock"},
		{"unix://host/abs/s.sock", "unix", "/abs/s.sock"},
		{"unix://s.sock", "unix", "s.sock"},
		{"unix:@abstract", "unix", "@abstract"},
		{"unixx:1", "tcp", "unixx:1"},
		{"unix:///%zz", "tcp", "unix:///%zz"},
	}
	for _, tc := range tests {
		n, a := dialNetwork(tc.in)
		if n != tc.network || a != tc.addr {
			t.Errorf("dialNetwork(%q) = %q, %q; want %q, %q", tc.in, n, a, tc.network, tc.addr)
		}
	}
}

// TestEscapeAuthority: bytes an authority cannot hold are percent-encoded,
// the rest kept, and a string without any is returned as it is.
func TestEscapeAuthority(t *testing.T) {
	tests := []struct{ in, want string }{
		{"example.com:443", "example.com:443"},
		{"[::1]:50051", "[::1]:50051"},
		{"user@host:1", "user@host:1"},
		{"a/b c", "a%2Fb%20c"},
		{"/x", "%2Fx"},
		{"é", "%C3%A9"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := escapeAuthority(tc.in); got != tc.want {
			t.Errorf("escapeAuthority(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
