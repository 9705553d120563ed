package store

import (
	"context"
	"runtime/pprof"
	"sync/atomic"
	"time"
)

// gopool.go: goroutines kept for the next short job. A Redis call runs in a
// goroutine of its own (doBounded: its caller waits for it or its deadline,
// whichever comes first), and so do a merged call's sends and a consumer's
// fetches: a new goroutine starts with a small stack that a call through
// radix grows, copying it, several times. Measured on the reliable
// single-call path (2 cores, 32 consumers, 8 producers), growing stacks took
// about a tenth of the process's CPU; a goroutine kept from one job to the
// next has its stack grown already.

// keptIdle is how long a kept goroutine waits for a job before it ends
// (nanoseconds; a test shortens it).
var keptIdle atomic.Int64

func init() { keptIdle.Store(int64(10 * time.Second)) }

// jobs hands a job to a kept goroutine waiting for one.
var jobs = make(chan job)

// job is a function to run, with the profiler labels (runtime/pprof) it
// runs under: its caller's, as a goroutine started by the caller would
// have, not those of whoever started the kept goroutine.
type job struct {
	labels context.Context
	f      func()
}

// Go runs f in a goroutine: a kept one waiting for work, or a new one, which
// is then kept for keptIdle after each job it runs. Go never waits. f runs
// under the profiler labels of ctx (runtime/pprof.WithLabels, pprof.Do):
// pass the caller's. f must return: a kept goroutine runs one job at a time.
func Go(ctx context.Context, f func()) {
	j := job{labels: ctx, f: f}
	select {
	case jobs <- j:
	default:
		go keep(j)
	}
}

func keep(j job) {
	t := time.NewTimer(time.Duration(keptIdle.Load()))
	defer t.Stop()
	for {
		pprof.SetGoroutineLabels(j.labels)
		j.f()
		j = job{} // not kept reachable while idle
		t.Reset(time.Duration(keptIdle.Load()))
		select {
		case j = <-jobs:
		case <-t.C:
			return
		}
	}
}
