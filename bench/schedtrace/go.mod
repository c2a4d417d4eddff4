module github.com/leangrpc/leangrpc/bench/schedtrace

go 1.26.0

require golang.org/x/exp v0.0.0-20261113113407-e3970619a1a4
