package store

import (
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
var jobs = make(chan func())

// Go runs f in a goroutine: a kept one waiting for work, or a new one, which
// is then kept for keptIdle after each job it runs. Go never waits. f must
// return: a kept goroutine runs one job at a time.
func Go(f func()) {
	select {
	case jobs <- f:
	default:
		go keep(f)
	}
}

func keep(f func()) {
	t := time.NewTimer(time.Duration(keptIdle.Load()))
	defer t.Stop()
	for {
		f()
		f = nil // not kept reachable while idle
		t.Reset(time.Duration(keptIdle.Load()))
		select {
		case f = <-jobs:
		case <-t.C:
			return
		}
	}
}
