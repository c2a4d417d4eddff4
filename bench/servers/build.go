package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// tonicDir is the tonic server's crate, relative to the repository root.
const tonicDir = "bench/servers/tonic"

// repoRoot returns the directory of leangrpc's go.mod.
func repoRoot(ctx context.Context) (string, error) {
	b, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run this inside the leangrpc module (go run ./bench/servers)")
	}
	return filepath.Dir(mod), nil
}

// buildServers builds the selected servers and returns each one's binary.
// The Go servers are the interop server program, built once per
// transport. tonic builds at low priority with few jobs, as the machine it
// runs on is often shared. nghttpd is installed, as h2load is; it is
// looked up here so that a missing one fails before any run.
func buildServers(ctx context.Context, o options, root string, log io.Writer) (map[string]string, error) {
	bins := map[string]string{
		serverLeangrpc: filepath.Join(o.binDir, "leangrpc-server"),
		serverGrpcGo:   filepath.Join(o.binDir, "grpcgo-server"),
		serverTonic:    filepath.Join(root, tonicDir, "target", "release", "tonic-testserver"),
	}
	if contains(o.servers, serverNghttpd) {
		path, err := exec.LookPath(o.nghttpd)
		if err != nil {
			return nil, fmt.Errorf("nghttpd (Debian: nghttp2-server; or -servers without it): %v", err)
		}
		bins[serverNghttpd] = path
	}
	if o.skipBuild {
		for _, s := range o.servers {
			if _, err := os.Stat(bins[s]); err != nil {
				return nil, fmt.Errorf("-skip_build: %v", err)
			}
		}
		return bins, nil
	}
	for _, s := range o.servers {
		var cmd *exec.Cmd
		switch s {
		case serverNghttpd:
			continue
		case serverLeangrpc:
			cmd = exec.CommandContext(ctx, "go", "build", "-o", bins[s], "./interop/server")
		case serverGrpcGo:
			cmd = exec.CommandContext(ctx, "go", "build", "-tags", "grpcgo_transport", "-o", bins[s], "./interop/server")
		case serverTonic:
			cmd = exec.CommandContext(ctx, "nice", "-n", "10", "cargo", "build", "--release", "--locked",
				"-j", fmt.Sprint(o.cargoJobs), "--manifest-path", filepath.Join(tonicDir, "Cargo.toml"))
		}
		cmd.Dir = root
		fmt.Fprintf(log, "# building %s: %s\n", s, strings.Join(cmd.Args, " "))
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("building %s: %v\n%s", s, err, tail(stderr.String(), 40))
		}
	}
	return bins, nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// machine describes the host for the report's header.
func machine() string {
	desc := fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				desc = strings.TrimSpace(v) + ", " + desc
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			desc += ", load average " + strings.Join(f[:3], " ")
		}
	}
	return desc
}
