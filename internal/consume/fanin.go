package consume

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/fanout"
	"github.com/prioq/prioq/internal/store"
)

// fanin.go: how a consumer of a queue of several shards takes: one blocking
// wait per shard, and the choice of the shard to take from.
//
// The consumer keeps, per shard, the best priority it believes the shard
// holds (its hint): learned from each take's reply (take.lua says the best
// priority left), from a probe (top.lua) when it knows nothing, and raised
// when the shard's wait reports new work: the wake-up's score is the best
// priority made ready since (internal/store/lua/inc/wake.lua arm_wake), or unknown. A fetch takes
// from the shard of the best hint, and only what is at least as good as the next best shard's
// hint, so a single consumer draining a queue serves it in strict priority
// order; with other consumers and producers at work, a hint can be stale
// for as long as it takes a take or a wake-up to correct it (the inversion
// rate the benchmark measures).
//
// Ties (shards whose best priorities are equal) are broken in turn: the
// first tied shard after the one that won the last tie. A hint a wake-up
// raised is a guess (the wake-up may be older than the consumer's last take
// from the shard, which learnt its best priority exactly): the consumer
// takes on it only what it promised (its floor is the guess), and before it
// breaks a tie with it, it probes the shard. So a consumer alone on a queue
// that no producer writes to meanwhile takes in one order, whatever the
// timing of its wake-ups, the order Queue.Peek shows (the root's fanInOrder).

// FanIn is the Source of a queue of several shards: the hints (hints.go)
// and the fetch that takes by them.
type FanIn struct {
	shards []*store.Shard
	opts   FetchOptions
	bg     context.Context // the consumer's: ends on Close
	report func(error)

	hints

	// TwoChoice (set by the fan-in benchmark only) makes fetches choose as
	// the MultiQueue does: see fetchTwoChoice.
	TwoChoice bool

	mu       sync.Mutex    // guards the three below, which waiters read
	fetching bool          // a fetch is in progress
	began    chan struct{} // closed when a fetch begins (then replaced)
	idle     chan struct{} // closed when a fetch begins to wait for work (then replaced)
}

// fetchState says whether a fetch is in progress, and gives a channel closed
// when the next one begins.
func (fi *FanIn) fetchState() (bool, <-chan struct{}) {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	return fi.fetching, fi.began
}

// idleState gives a channel closed when a fetch next begins to wait for
// work (awaitWork): the moment a parked waiter must watch the wake-up again
// at once (pokeWhen).
func (fi *FanIn) idleState() <-chan struct{} {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	return fi.idle
}

// waitsForWork says that the fetch in progress found nothing and waits.
func (fi *FanIn) waitsForWork() {
	fi.mu.Lock()
	close(fi.idle)
	fi.idle = make(chan struct{})
	fi.mu.Unlock()
}

// fetchBegins marks a fetch in progress until the returned func is called.
func (fi *FanIn) fetchBegins() (ends func()) {
	fi.mu.Lock()
	fi.fetching = true
	close(fi.began)
	fi.began = make(chan struct{})
	fi.mu.Unlock()
	return func() {
		fi.mu.Lock()
		fi.fetching = false
		fi.mu.Unlock()
	}
}

// NewFanIn is the source of a consumer of the shards of one queue; each
// shard needs a Waiter (NewWaiter) for the fan-in to learn of new work.
func NewFanIn(shards []*store.Shard, opts FetchOptions, bg context.Context, report func(error)) *FanIn {
	return &FanIn{shards: shards, opts: opts.withDefaults(), bg: bg, report: report, hints: newHints(len(shards)),
		began: make(chan struct{}), idle: make(chan struct{})}
}

// Fetch is the Source's, for a queue of several shards: learn what is not
// known, take from the best shard, and wait for any shard's wake-up when all
// are empty (while a caller still wants the result).
// A fetch of several fills its batch shard after shard, each take no lower
// than the best the other shards hold, so the batch stays in order.
func (fi *FanIn) Fetch(n int, wanted func() bool) ([]*store.Delivery, error) {
	defer fi.fetchBegins()()
	if fi.TwoChoice {
		return fi.fetchTwoChoice(n, wanted)
	}
	// A shard whose call fails (its primary down, failing over) is reported
	// and left alone for RetryInterval while the others are served; the
	// fetch fails only when every shard is.
	var out []*store.Delivery
	for len(out) < n {
		retry, allDown := fi.upAgain(time.Now())
		if allDown != nil && len(out) == 0 {
			return nil, allDown
		}
		fi.applyRaised()
		fi.probeUnknown()
		if fi.guessedTie() {
			continue // probed, then chosen again
		}
		i, next := fi.best()
		if i < 0 {
			if len(out) > 0 {
				return out, nil
			}
			if !wanted() {
				return nil, nil
			}
			if err := fi.awaitWork(retry); err != nil {
				return nil, err
			}
			continue
		}
		msgs, err := fi.takeAtLeast(i, n-len(out), next)
		out = append(out, msgs...)
		if err != nil {
			// A shard whose slot is moving is left alone as one that
			// fails, unreported: a resharding is routine.
			if !store.MovedAway(err) {
				fi.report(err)
			}
			fi.markDown(i, fi.opts.RetryInterval, err)
		}
	}
	return out, nil
}

// awaitWork waits for a waiter to report work, at most BlockTimeout, or
// until (when not 0).
func (fi *FanIn) awaitWork(until time.Duration) error {
	d := fi.opts.BlockTimeout
	if until > 0 {
		d = min(d, until)
	}
	fi.waitsForWork()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-fi.signal:
	case <-t.C:
	case <-fi.bg.Done():
		return store.ErrClosed
	}
	return nil
}

// fetchTwoChoice chooses as the MultiQueue does (Rihani, Sanders and
// Dementiev 2015; Williams and Sanders 2025): ask two shards drawn at random
// for their best priority, and take from the better what it holds of that
// priority, with no memory of earlier replies. It is the published baseline that the fan-in
// benchmark (BenchmarkFanInInversions) compares fetchFanIn's hints with, and
// serves no other purpose.
func (fi *FanIn) fetchTwoChoice(n int, wanted func() bool) ([]*store.Delivery, error) {
	for {
		for range 2 * len(fi.shards) {
			i := rand.IntN(len(fi.shards))
			j := (i + 1 + rand.IntN(len(fi.shards)-1)) % len(fi.shards)
			var ti, tj int64
			var ei, ej error
			done := make(chan struct{})
			go func() {
				defer close(done)
				ctx, cancel := context.WithTimeout(context.Background(), fi.shards[j].Config().CallTimeout)
				defer cancel()
				tj, ej = Top(ctx, fi.shards[j])
			}()
			ctx, cancel := context.WithTimeout(context.Background(), fi.shards[i].Config().CallTimeout)
			ti, ei = Top(ctx, fi.shards[i])
			cancel()
			<-done
			if ei != nil || ej != nil {
				return nil, errors.Join(ei, ej)
			}
			if tj > ti {
				i, ti = j, tj
			}
			if ti == hintEmpty {
				continue
			}
			// Up to n of the chosen shard's best priority: a pop of one, n times.
			if msgs, err := fi.takeAtLeast(i, n, ti); len(msgs) > 0 || err != nil {
				return msgs, err
			}
		}
		if !wanted() {
			return nil, nil
		}
		if err := fi.awaitWork(0); err != nil {
			return nil, err
		}
	}
}

// probeUnknown asks every shard of unknown hint its best priority (top.lua),
// the shards at once; a shard it cannot ask is reported and left alone.
func (fi *FanIn) probeUnknown() {
	var unknown []int
	for i, h := range fi.hint {
		if h == hintUnknown {
			unknown = append(unknown, i)
		}
	}
	if len(unknown) == 0 {
		return
	}
	tops := make([]int64, len(unknown))
	errs := make([]error, len(unknown))
	fanout.Each(len(unknown), len(unknown), func(j int) {
		ctx, cancel := context.WithTimeout(context.Background(), fi.shards[unknown[j]].Config().CallTimeout)
		defer cancel()
		tops[j], errs[j] = Top(store.WithRedirectBudget(ctx, store.RedirectBudget), fi.shards[unknown[j]])
	})
	for j, i := range unknown {
		if errs[j] != nil {
			if !store.MovedAway(errs[j]) {
				fi.report(errs[j])
			}
			fi.markDown(i, fi.opts.RetryInterval, errs[j])
			continue
		}
		fi.set(i, tops[j])
	}
}

// takeAtLeast takes up to n messages from shard i, of priority next or
// better (next: the best hint of the other shards), and records what the
// shard holds after it.
func (fi *FanIn) takeAtLeast(i, n int, next int64) ([]*store.Delivery, error) {
	s := fi.shards[i]
	a := store.TakeArgs{Lanes: s.Keys().HighFirst(), N: n, Top: true, Guess: true}
	if s.Config().Mode == store.AtLeastOnce {
		a.Lease = fi.opts.Lease
	}
	if fi.guess[i] {
		// A guess takes only what it promised: a stale one takes nothing
		// (and learns the shard's best), so that it takes no turn.
		next = fi.hint[i]
	}
	if next != hintEmpty {
		// The lanes of priority next and better: highFirst down to next's.
		layout := s.Config().Layout
		floor := min(max(next, layout.Lowest()), layout.Highest())
		if lane, err := layout.LaneOf(floor); err == nil {
			a.PopLanes = layout.Lanes() - lane
			a.Floor, a.Floored = floor, true
		}
	}
	// Not derived from bg: a take abandoned by Close would lease messages
	// nobody holds until their leases ran out. It ends by itself, and gives
	// up soon on a shard whose slot is moving (the others are served
	// meanwhile: withRedirectBudget).
	ctx, cancel := context.WithTimeout(context.Background(), s.Config().CallTimeout)
	defer cancel()
	r, err := s.Take(store.WithRedirectBudget(ctx, store.RedirectBudget), a)
	if err != nil {
		fi.set(i, hintUnknown)
		return nil, err
	}
	for _, err := range r.Dropped {
		fi.report(err)
	}
	fi.set(i, hintEmpty)
	if r.HasTop && !r.Paused {
		fi.set(i, r.Top)
	}
	if r.Limited > 0 {
		// At its share of the queue's rate limit: left alone until its
		// next message may be taken, the other shards served meanwhile.
		fi.markDown(i, r.Limited, fi.err) // (a shard's failure stays the one to report)
	}
	return r.Deliveries, nil
}

// Top is the best priority of shard s's ready messages, math.MinInt64 when
// none or paused. One round trip.
func Top(ctx context.Context, s *store.Shard) (int64, error) {
	p, ok, err := s.Top(ctx)
	if err != nil || !ok {
		return hintEmpty, err
	}
	return p, nil
}
