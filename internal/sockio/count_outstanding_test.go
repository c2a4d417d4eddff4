package sockio

import "github.com/leangrpc/leangrpc/internal/bufpool"

// Every buffer of this test binary counts in Pool.Outstanding, which the
// leak checks compare with a baseline.
func init() { bufpool.CountOutstanding() }
