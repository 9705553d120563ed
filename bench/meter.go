package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// meter.go: what a measured phase cost, read around it: Redis's commands
// and CPU (INFO), the round trips the bench's client made, and the bench
// process's own CPU.

// serverStats is what INFO says about the whole server at one instant.
type serverStats struct {
	commands int64   // total_commands_processed (Lua inner calls included)
	cpu      float64 // used_cpu_sys + used_cpu_user, seconds
	memory   int64   // used_memory, bytes
}

func readStats(ctx context.Context, c radix.Client) (serverStats, error) {
	var info string
	if err := c.Do(ctx, radix.Cmd(&info, "INFO", "all")); err != nil {
		return serverStats{}, err
	}
	var s serverStats
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "total_commands_processed":
			s.commands, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		case "used_memory":
			s.memory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return s, nil
}

// meter holds the readings at the start of a phase (startMeter).
type meter struct {
	c     radix.Client
	stats serverStats
	trips int64
	cpu   time.Duration
}

// startMeter reads INFO, then the round trips and the process's CPU (so
// that neither counts that INFO).
func startMeter(ctx context.Context, c radix.Client) (*meter, error) {
	st, err := readStats(ctx, c)
	if err != nil {
		return nil, err
	}
	return &meter{c: c, stats: st, trips: tripsOf(c), cpu: processCPU()}, nil
}

// phaseCost is what a phase cost, from startMeter to stop.
type phaseCost struct {
	commands  int64   // less stop's own INFO
	redisCPU  float64 // seconds
	trips     int64
	clientCPU time.Duration
}

// stop reads the round trips and the process's CPU, then INFO.
func (m *meter) stop(ctx context.Context) (phaseCost, error) {
	trips, cpu := tripsOf(m.c), processCPU()
	st, err := readStats(ctx, m.c)
	if err != nil {
		return phaseCost{}, err
	}
	return phaseCost{commands: st.commands - m.stats.commands - 1, redisCPU: st.cpu - m.stats.cpu,
		trips: trips - m.trips, clientCPU: cpu - m.cpu}, nil
}

// fill sets t's rate and per-message costs from its Handled and Seconds.
func (pc phaseCost) fill(t *throughput) {
	n := float64(t.Handled)
	if n <= 0 {
		return
	}
	t.Rate = n / t.Seconds
	t.CmdsPerMsg = float64(pc.commands) / n
	t.CPUPerMsg = pc.redisCPU * 1e6 / n
	t.TripsPerMsg = float64(pc.trips) / n
	t.ClientCPUPerMsg = pc.clientCPU.Seconds() * 1e6 / n
}

// processCPU is the CPU time (user + system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tripsOf is how many calls c made so far, if it counts them (0 if not).
func tripsOf(c radix.Client) int64 {
	if cc, ok := c.(*countingClient); ok {
		return cc.n.Load()
	}
	return 0
}
