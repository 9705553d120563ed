package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
)

// runAsynq builds and runs bench/asynqpeer (a command of the bench module,
// so asynq and go-redis stay out of prioq's go.mod, run as a process of its
// own so that its goroutines and garbage do not share the measuring
// process) against the same Redis, and reads back the same measurements as
// JSON.
func runAsynq(ctx context.Context, addr string, p params) *sysResult {
	r := &sysResult{Name: asynqPeer, Reliable: true, Priorities: true}
	dir, err := peerDir()
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	// The peer runs once: it watches an idle server for as long as each
	// system is watched over its rounds, so that a load that comes every
	// few seconds is not missed by one short window.
	p.IdleSeconds *= float64(max(p.Rounds, 1))
	args, _ := json.Marshal(p)
	cmd := exec.CommandContext(ctx, "go", "run", ".", "-addr", addr, "-params", string(args))
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		r.Errors = append(r.Errors, fmt.Sprintf("asynq peer: %v", err))
		return r
	}
	// The peer is another program: check the key results came back.
	if err := json.Unmarshal(out, r); err != nil {
		r.Errors = append(r.Errors, fmt.Sprintf("asynq peer output: %v", err))
	} else if r.E2E == nil || r.Pickup == nil {
		r.Errors = append(r.Errors, "asynq peer output lacks end_to_end or idle_pickup_ms")
	}
	// The peer's output names nothing about asynq itself: say it here.
	r.Name, r.Reliable, r.Priorities = asynqPeer, true, true
	return r
}

// peerDir finds bench/asynqpeer from the working directory or this file.
func peerDir() (string, error) {
	for _, d := range []string{"bench/asynqpeer", "asynqpeer"} {
		if st, err := os.Stat(filepath.Join(d, "main.go")); err == nil && !st.IsDir() {
			return filepath.Abs(d)
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		d := filepath.Join(filepath.Dir(file), "asynqpeer")
		if _, err := os.Stat(filepath.Join(d, "main.go")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("bench/asynqpeer not found: run from the repository root")
}
