package consume

import (
	"math"
	"sync/atomic"
	"time"
)

// hints.go: a FanIn's belief of what each shard holds (see fanin.go): how
// waiters raise it, takes and probes set it, failures leave a shard alone,
// and the best shard is chosen.

// Hints: a priority, or one of these.
const (
	hintUnknown = math.MaxInt64 // nothing known: probe before choosing
	hintEmpty   = math.MinInt64 // nothing ready (or paused), as far as known
)

// hints are a FanIn's, per shard. Only the fetch in progress (one at a time)
// reads and writes hint and rr; its Waiters raise raised.
type hints struct {
	hint   []int64
	guess  []bool         // hint[i] was raised by a wake-up, not read from the shard
	down   []time.Time    // a shard that failed a call: left alone until then (zero: up)
	err    error          // the last such failure
	raised []atomic.Int64 // the best priority waiters saw made ready since (hintEmpty: none)
	signal chan struct{}  // raised was (capacity 1)
	rr     int            // where the last tie was broken
}

// newHints are the hints of n shards, each unknown.
func newHints(n int) hints {
	h := hints{hint: make([]int64, n), guess: make([]bool, n), down: make([]time.Time, n), raised: make([]atomic.Int64, n),
		signal: make(chan struct{}, 1)}
	for i := range h.hint {
		h.hint[i] = hintUnknown
		h.raised[i].Store(hintEmpty)
	}
	return h
}

// raise says shard i now holds work of priority p (hintUnknown: of some
// priority).
func (fi *hints) raise(i int, p int64) {
	for {
		old := fi.raised[i].Load()
		if old >= p || fi.raised[i].CompareAndSwap(old, p) {
			break
		}
	}
	select {
	case fi.signal <- struct{}{}:
	default:
	}
}

// applyRaised folds what the waiters saw into the hints, but for shards
// left alone after a failure (they are probed again when that ends). A hint
// raised by a known priority is a guess (see the file's comment).
func (fi *hints) applyRaised() {
	for i := range fi.raised {
		if p := fi.raised[i].Swap(hintEmpty); p != hintEmpty && fi.down[i].IsZero() && p > fi.hint[i] {
			fi.hint[i], fi.guess[i] = p, p != hintUnknown
		}
	}
}

// set records what shard i was found to hold: a hint that is no guess.
func (fi *hints) set(i int, h int64) { fi.hint[i], fi.guess[i] = h, false }

// markDown leaves shard i alone for retry after a call on it failed with
// err: its hint reads empty, so the others are served meanwhile.
func (fi *hints) markDown(i int, retry time.Duration, err error) {
	fi.set(i, hintEmpty)
	fi.down[i], fi.err = time.Now().Add(retry), err
}

// upAgain makes the shards whose time alone has passed unknown again, to be
// probed, and returns how long until the next one's does (0: none is down)
// and the last failure when every shard is down.
func (fi *hints) upAgain(now time.Time) (next time.Duration, allDown error) {
	down := 0
	for i, t := range fi.down {
		switch {
		case t.IsZero():
		case !now.Before(t):
			fi.down[i] = time.Time{}
			fi.set(i, hintUnknown)
		default:
			down++
			if d := t.Sub(now); next == 0 || d < next {
				next = d
			}
		}
	}
	if down == len(fi.down) {
		return next, fi.err
	}
	return next, nil
}

// best is the shard of the best hint (-1: all empty), ties broken in turn so
// that equal shards share the load, and the best hint of the others. Only a
// tie moves the turn on: the next tie starts after its winner.
func (fi *hints) best() (shard int, next int64) {
	shard, next = -1, hintEmpty
	top := int64(hintEmpty)
	n := len(fi.hint)
	for j := 1; j <= n; j++ {
		i := (fi.rr + j) % n
		switch h := fi.hint[i]; {
		case h == hintEmpty:
		case shard < 0 || h > top:
			if shard >= 0 {
				next = max(next, top)
			}
			shard, top = i, h
		default:
			next = max(next, h)
		}
	}
	if shard >= 0 && next == top {
		fi.rr = shard
	}
	return shard, next
}

// guessedTie makes unknown (to be probed) the guessed hints tied at the
// best, and reports whether there were any: a tie is broken on hints read
// from the shards alone, so that a stale guess cannot take a turn.
func (fi *hints) guessedTie() bool {
	top, tied := int64(hintEmpty), 0
	for _, h := range fi.hint {
		switch {
		case h > top:
			top, tied = h, 1
		case h == top:
			tied++
		}
	}
	if top == hintEmpty || tied < 2 {
		return false
	}
	found := false
	for i, h := range fi.hint {
		if h == top && fi.guess[i] {
			fi.set(i, hintUnknown)
			found = true
		}
	}
	return found
}

// FanInOrder is the order in which a fan-in takes, one message at a time,
// from shards whose ready priorities are per[i] (each shard's in its own
// order): the shard index of each message taken, at most n. Queue.Peek of a
// sharded queue shows its messages in this order.
func FanInOrder(per [][]int64, n int) []int {
	fi := &hints{hint: make([]int64, len(per))}
	next := make([]int, len(per))
	hint := func(i int) int64 {
		if next[i] < len(per[i]) {
			return per[i][next[i]]
		}
		return hintEmpty
	}
	for i := range per {
		fi.hint[i] = hint(i)
	}
	var out []int
	for len(out) < n {
		i, _ := fi.best()
		if i < 0 {
			break
		}
		out = append(out, i)
		next[i]++
		fi.hint[i] = hint(i)
	}
	return out
}
