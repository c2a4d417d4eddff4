package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The attack runs in a process of its own at a lower priority (nice 10):
// on a machine with few cores an attacker in the measuring process would
// take CPU from the legitimate client and make the server look slower than
// it is. A real attacker's CPU is on other machines; here it gets only what
// the server and the legitimate client leave.

// attackerFlag makes the command the attacking process: -attacker NAME
// -attack_addr ADDR -attack_duration D, its stats as JSON on stdout.
const attackerFlag = "attacker"

// slowlorisGrace keeps slowloris's connections open a little past the
// attack's time, so that a server closing them at a deadline equal to the
// attack's length is seen doing it.
const slowlorisGrace = 2 * time.Second

// stalledSample is when, into the attack, slowloris's cost per connection
// is read: the connections are all open and settled, and a default
// server's ConnectionTimeout (10 s) has not closed them yet.
const stalledSample = 8 * time.Second

// startAttacker starts the attacking process for a against addr.
func startAttacker(ctx context.Context, a attack, addr string, d time.Duration) (*exec.Cmd, *bytes.Buffer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	args := []string{"-n", "10", self, "-" + attackerFlag, a.name, "-attack_addr", addr, "-attack_duration", d.String()}
	cmd := exec.CommandContext(ctx, "nice", args...)
	out := &bytes.Buffer{}
	cmd.Stdout = out
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("attacker: %v", err)
	}
	return cmd, out, nil
}

// waitAttacker waits for the attacking process and decodes its stats.
func waitAttacker(cmd *exec.Cmd, out *bytes.Buffer) (*attackStats, error) {
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("attacker: %v", err)
	}
	st := &attackStats{}
	if err := json.Unmarshal(out.Bytes(), st); err != nil {
		return nil, fmt.Errorf("attacker's report %q: %v", out.String(), err)
	}
	return st, nil
}

// runAttacker is the attacking process's main: it attacks addr for d and
// prints its stats.
func runAttacker(name, addr string, d time.Duration, out io.Writer) error {
	for _, a := range allAttacks {
		if a.name != name {
			continue
		}
		if name == "slowloris" {
			d += slowlorisGrace
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		st := &attackStats{}
		a.run(ctx, addr, st)
		return json.NewEncoder(out).Encode(st)
	}
	return fmt.Errorf("unknown attack %q; attacks: %s", name, strings.Join(attackNames(), ", "))
}
