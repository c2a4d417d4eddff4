package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// File is the document written by -json and read by compare.
type File struct {
	Env     Env      `json:"env"`
	Results []Result `json:"results"`
}

// Env describes the build and the machine that produced a File.
type Env struct {
	Go         string `json:"go"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GrpcGo     string `json:"grpcGo"`
	Leangrpc   string `json:"leangrpc"`
	Time       string `json:"time"`
	Args       string `json:"args,omitempty"`
	// Compression is the compressor the clients used (-compression), ""
	// for none.
	Compression string `json:"compression,omitempty"`
	// Balancing is "N backends, POLICY" for multi-backend runs
	// (-backends, -lb), empty otherwise.
	Balancing string `json:"balancing,omitempty"`
	// LoadAvg is the 1-minute load average when leanbench started (Linux):
	// figures taken on a machine with load above its CPU count are noisy.
	LoadAvg float64 `json:"loadAvg,omitempty"`
	// Security is how the connections were protected: "TLS 1.3, ECDSA
	// P-256" when every run was over TLS (-tls), empty when none was (and
	// in files from before -tls existed), "plaintext (tls rows: TLS 1.3,
	// ECDSA P-256)" when both were (the quick suite); each Result's TLS
	// says which.
	Security string `json:"security,omitempty"`
}

// securityLabel names e's connection security for people.
func (e Env) securityLabel() string {
	if e.Security == "" {
		return "plaintext"
	}
	return e.Security
}

// Result is one run: one stack, workload, shape and round. Throughput runs
// carry Shape and Figures; idle runs carry Server and Client. A run that
// failed carries Error and no figures.
type Result struct {
	Stack    string `json:"stack"`
	Workload string `json:"workload"`
	*Shape
	Connections int `json:"connections"`
	// TLS is set for a run over TLS (config.tls); absent for plaintext.
	TLS   bool `json:"tls,omitempty"`
	Round int  `json:"round"`
	*Figures
	Server *IdleSide `json:"server,omitempty"`
	Client *IdleSide `json:"client,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// Shape is the message sizes and the number of calls in flight of a
// throughput run.
type Shape struct {
	ReqSize     int `json:"reqSize"`
	RespSize    int `json:"respSize"`
	Concurrency int `json:"concurrency"`
}

// Figures are the measurements of a throughput run. Allocations and bytes
// are process-wide (client and server together), as benchmain counts them.
type Figures struct {
	Seconds        float64 `json:"seconds"`
	Ops            int64   `json:"ops"`
	OpsPerSec      float64 `json:"opsPerSec"`
	AllocsPerOp    float64 `json:"allocsPerOp"`
	BytesPerOp     float64 `json:"bytesPerOp"`
	CPUMicrosPerOp float64 `json:"cpuMicrosPerOp"`
	MBPerSec       float64 `json:"mbPerSec"`
	Latency        Latency `json:"latencyMicros"`
}

// Latency is in microseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// IdleSide is what one process (server or client) of the idle workload
// costs per connection, against the same process with zero connections.
type IdleSide struct {
	RSSBytesPerConn   float64 `json:"rssBytesPerConn"`
	HeapBytesPerConn  float64 `json:"heapBytesPerConn"`
	StackBytesPerConn float64 `json:"stackBytesPerConn"`
	GoroutinesPerConn float64 `json:"goroutinesPerConn"`
	// MarginalRSSBytesPerConn is the slope of RSS between half and all
	// of the connections: what one more idle connection costs, without
	// the process's one-time costs of its first connections.
	MarginalRSSBytesPerConn float64 `json:"marginalRssBytesPerConn"`
	RSSBytes                int64   `json:"rssBytes"` // at the measurement
	BaselineRSSBytes        int64   `json:"baselineRssBytes"`
	BaselineGoroutines      int     `json:"baselineGoroutines"`
	// OpenSeconds, on the client side, is the wall time it took to open
	// the connections and make each one's RPC, idleDialers at a time;
	// absent on the server side and in files from before it existed.
	OpenSeconds float64 `json:"openSeconds,omitempty"`
}

func currentEnv(args []string) Env {
	e := Env{
		Go:         runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GrpcGo:     "unknown",
		Leangrpc:   "dev",
		Time:       time.Now().UTC().Format(time.RFC3339),
		Args:       strings.Join(args, " "),
		LoadAvg:    loadAverage(),
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return e
	}
	for _, d := range bi.Deps {
		if d.Path == "google.golang.org/grpc" {
			e.GrpcGo = d.Version
			if d.Replace != nil {
				e.GrpcGo = d.Replace.Version
			}
		}
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case rev != "":
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if modified == "true" {
			rev += "+dirty"
		}
		e.Leangrpc = rev
	case bi.Main.Version != "" && bi.Main.Version != "(devel)":
		e.Leangrpc = bi.Main.Version
	default:
		// go run does not stamp VCS information; ask git, briefly.
		if r := gitRevision(); r != "" {
			e.Leangrpc = r
		}
	}
	return e
}

// loadAverage returns the 1-minute load average, or 0 where
// /proc/loadavg does not exist.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func gitRevision() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(strings.TrimSpace(string(st))) > 0 {
		rev += "+dirty"
	}
	return "dev-" + rev
}

func writeJSON(path string, f *File) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func readJSON(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Env.Security == tlsDescription {
		// Every run was over TLS. Files from before results carried
		// TLS say so here only, and compare must match their rows
		// with TLS rows.
		for i := range f.Results {
			f.Results[i].TLS = true
		}
	}
	return &f, nil
}
