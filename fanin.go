package prioq

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// fanin.go: how a consumer of a queue of several shards takes: one blocking
// wait per shard, and the choice of the shard to take from.
//
// The consumer keeps, per shard, the best priority it believes the shard
// holds (its hint): learned from each take's reply (take.lua says the best
// priority left), from a probe (top.lua) when it knows nothing, and forgotten
// when the shard's wait reports new work. A fetch takes from the shard of the
// best hint, and only what is at least as good as the next best shard's
// hint, so a single consumer draining a queue serves it in strict priority
// order; with other consumers and producers at work, a hint can be stale
// for as long as it takes a take or a wake-up to correct it (the inversion
// rate the benchmark measures).

// Hints: a priority, or one of these.
const (
	hintUnknown = math.MaxInt64 // nothing known: probe before choosing
	hintEmpty   = math.MinInt64 // nothing ready (or paused), as far as known
)

// fanin is the fetcher's state for a queue of several shards. Only the fetch
// in progress (one at a time) reads and writes hint and rr; waiters mark
// dirty.
type fanin struct {
	hint   []int64
	dirty  []atomic.Bool
	signal chan struct{} // a dirty mark was made (capacity 1)
	rr     int           // where the last tie was broken
}

func newFanin(shards int) *fanin {
	f := &fanin{hint: make([]int64, shards), dirty: make([]atomic.Bool, shards), signal: make(chan struct{}, 1)}
	for i := range f.hint {
		f.hint[i] = hintUnknown
	}
	return f
}

// mark says shard i may hold new work.
func (fi *fanin) mark(i int) {
	fi.dirty[i].Store(true)
	select {
	case fi.signal <- struct{}{}:
	default:
	}
}

// best is the shard of the best hint (-1: all empty), ties broken in turn so
// that equal shards share the load, and the best hint of the others.
func (fi *fanin) best() (shard int, next int64) {
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
	if shard >= 0 {
		fi.rr = shard
	}
	return shard, next
}

// fetchFanIn is the fetch of a queue of several shards: learn what is not
// known, take from the best shard, and wait for any shard's wake-up when all
// are empty (while a caller still wants the result).
// A fetch of several fills its batch shard after shard, each take no lower
// than the best the other shards hold, so the batch stays in order.
func (f *fetcher) fetchFanIn(n int) ([]*Message, error) {
	fi := f.fanin
	var out []*Message
	for len(out) < n {
		for i := range fi.dirty {
			if fi.dirty[i].Swap(false) {
				fi.hint[i] = hintUnknown
			}
		}
		if err := f.probeUnknown(); err != nil {
			return out, err
		}
		i, next := fi.best()
		if i < 0 {
			if len(out) > 0 {
				return out, nil
			}
			if !f.stillWanted() {
				return nil, nil
			}
			t := time.NewTimer(f.cfg.BlockTimeout)
			select {
			case <-fi.signal:
			case <-t.C:
			case <-f.bg.Done():
				t.Stop()
				return nil, ErrClosed
			}
			t.Stop()
			continue
		}
		msgs, err := f.takeAtLeast(i, n-len(out), next)
		out = append(out, msgs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// probeUnknown asks every shard of unknown hint its best priority (top.lua),
// the shards at once.
func (f *fetcher) probeUnknown() error {
	fi := f.fanin
	var unknown []int
	for i, h := range fi.hint {
		if h == hintUnknown {
			unknown = append(unknown, i)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	tops := make([]int64, len(unknown))
	errs := make([]error, len(unknown))
	done := make(chan struct{}, len(unknown))
	for j, i := range unknown {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithTimeout(context.Background(), f.shards[i].cfg.CallTimeout)
			defer cancel()
			tops[j], errs[j] = f.shards[i].top(ctx)
		}()
	}
	for range unknown {
		<-done
	}
	for j, i := range unknown {
		if errs[j] != nil {
			return errs[j]
		}
		fi.hint[i] = tops[j]
	}
	return nil
}

// takeAtLeast takes up to n messages from shard i, of priority next or
// better (next: the best hint of the other shards), and records what the
// shard holds after it.
func (f *fetcher) takeAtLeast(i, n int, next int64) ([]*Message, error) {
	s, fi := f.shards[i], f.fanin
	a := takeArgs{lanes: s.k.highFirst, n: n, top: true}
	if s.cfg.Mode == AtLeastOnce {
		a.lease = f.cfg.Lease
	}
	if next != hintEmpty {
		// The lanes of priority next and better: highFirst down to next's.
		floor := min(max(next, s.cfg.Layout.lowest()), s.cfg.Layout.highest())
		if lane, err := s.cfg.Layout.laneOf(floor); err == nil {
			a.popLanes = len(s.k.lanes) - lane
			a.floor = fmtInt(floor)
		}
	}
	// Not derived from bg: a take abandoned by Close would lease messages
	// nobody holds until their leases ran out. It ends by itself.
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
	defer cancel()
	r, err := s.takeFrom(ctx, a)
	if err != nil {
		fi.hint[i] = hintUnknown
		return nil, err
	}
	for _, err := range r.dropped {
		f.report(err)
	}
	fi.hint[i] = hintEmpty
	if r.hasTop && !r.paused {
		fi.hint[i] = r.top
	}
	return r.msgs, nil
}

// top is the best priority of the shard's ready messages, hintEmpty when
// none or paused. One round trip.
func (s *shard) top(ctx context.Context) (int64, error) {
	var got string
	keys := append([]string{s.k.paused}, s.k.highFirst...)
	if err := s.do(ctx, topScript.Cmd(&got, keys, s.kind())); err != nil {
		return 0, fmt.Errorf("prioq: probe %q: %w", s.name, err)
	}
	if got == "" {
		return hintEmpty, nil
	}
	var p int64
	if _, err := fmt.Sscan(got, &p); err != nil {
		return 0, fmt.Errorf("prioq: probe %q: %w: %q", s.name, ErrScript, got)
	}
	return p, nil
}

// waiter is a consumer's one blocking wait on a shard of a queue of several
// shards: BZPOPMIN on its wake-up set, whose member says what happened: work
// became ready (the fetcher's hint of the shard is forgotten) or an earlier
// due time was scheduled (the shard's promoter re-reads it). It runs while
// the consumer is open, busy or not, so a busy consumer learns of new work
// on other shards too. A wait that times out marks the shard too, for an
// AtMostOnce queue: nothing re-arms a wake-up lost with a killed consumer
// there (AtLeastOnce has the sweep), so a lost one costs BlockTimeout at most.
type waiter struct {
	s      *shard
	i      int
	cfg    *ConsumerConfig
	fanin  *fanin
	due    chan<- struct{} // the shard's promoter, or nil
	report func(error)
}

func (w *waiter) run(ctx context.Context) {
	s := w.s
	timeout := fmtSeconds(w.cfg.BlockTimeout)
	for ctx.Err() == nil {
		var got []string // key, member, score; a fresh receiver per call
		wctx, cancel := context.WithTimeout(ctx, w.cfg.BlockTimeout+blockMargin)
		err := s.do(wctx, radix.Cmd(&got, "BZPOPMIN", s.k.wake, timeout))
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			// Cancelling closed the connection; a member popped in that
			// instant would be lost, so put one back (the promoter puts its
			// own back as it stops).
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.do(rctx, radix.Cmd(nil, "ZADD", s.k.wake, "0", wakeMember))
			cancel()
			return
		case err != nil:
			w.report(fmt.Errorf("prioq: wait on %q: %w", s.name, err))
			sleepCtx(ctx, w.cfg.RetryInterval)
		case len(got) < 2:
			if s.cfg.Mode == AtMostOnce {
				w.fanin.mark(w.i)
			}
		case got[1] == dueMember:
			if w.due != nil {
				select {
				case w.due <- struct{}{}:
				default:
				}
			}
		default:
			w.fanin.mark(w.i)
		}
	}
}
