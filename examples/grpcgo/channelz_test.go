package grpcgo

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	channelzpb "google.golang.org/grpc/channelz/grpc_channelz_v1"
	"google.golang.org/grpc/credentials/insecure"
)

// channelzCounts asks the debugging example's channelz services, while its
// programs run, what they list: the client program's (on the -addr it is
// given) its top channels, the server program's (on :50052) its servers.
// grpc-go registers its channels and servers with channelz; leangrpc does
// not and cannot through grpc-go's public API (OPTIONS.md), so a leangrpc
// end lists nothing while its calls behave as grpc-go's. That is what
// "behaves as with grpc-go" means here: the same calls and answers, and
// channelz listing exactly the grpc-go ends.
func channelzCounts(t *testing.T, p pairing, env map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	count := func(addr string, servers bool) int {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		c := channelzpb.NewChannelzClient(cc)
		if servers {
			r, err := c.GetServers(ctx, &channelzpb.GetServersRequest{})
			if err != nil {
				t.Fatalf("channelz GetServers on %s: %v", addr, err)
			}
			return len(r.Server)
		}
		r, err := c.GetTopChannels(ctx, &channelzpb.GetTopChannelsRequest{})
		if err != nil {
			t.Fatalf("channelz GetTopChannels on %s: %v", addr, err)
		}
		return len(r.Channel)
	}
	channels := count("localhost:"+env["port"], false)
	servers := count("localhost:50052", true)
	t.Logf("channelz: the client program lists %d top channels, the server program %d servers", channels, servers)
	// The grpc-go client program has one channel; its channelz server is
	// grpc-go's in both variants (only the client rules convert it).
	if want := map[bool]int{false: 1, true: 0}[p.leanClient]; channels != want {
		t.Errorf("client program's channelz lists %d top channels, want %d", channels, want)
	}
	// The grpc-go server program has four servers: channelz's and three
	// greeters'.
	if want := map[bool]int{false: 4, true: 0}[p.leanServer]; servers != want {
		t.Errorf("server program's channelz lists %d servers, want %d", servers, want)
	}
}
