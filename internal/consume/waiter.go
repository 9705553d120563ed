package consume

import (
	"context"
	"fmt"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// wakePriority reads the wake-up's score: the best priority made ready, or
// hintUnknown when that is not known.
func wakePriority(score string) int64 {
	if p, ok := store.WakePriority(score); ok {
		return p
	}
	return hintUnknown
}

// Waiter is a consumer's one blocking wait on a shard of a queue of several
// shards: BZPOPMIN on its wake-up set and, when the consumer promotes, on its
// sched set too (one command: the first set that has a member gives it). A
// wake-up says work became ready, and of which best priority; a sched member
// says an earlier due time was scheduled (the shard's promoter re-reads it).
// The sched set is named first: Redis pops from the first key that has a
// member, and the wake-up is set again by every take that leaves work, so
// with the wake-up first a shard being drained would never be asked for its
// sched set, and a delayed message would wait for PromoteWait.
//
// It runs while the consumer is open, busy or not, so a busy consumer learns
// of new work on other shards too. But Redis hands the one wake-up to one
// waiting client, so a waiter whose consumer is not fetching (Run with every
// worker busy) learns from it and, unless its consumer begins a fetch within
// wakeHold, puts it back for a consumer that may be waiting, and pops the
// wake-up again only once its own consumer fetches (or after BlockTimeout):
// a wake-up is never kept from an idle consumer for more than wakeHold.
// Meanwhile (parked) it still watches the sched set, with the consumer's
// poke key of the shard beside it, which the consumer sets (pokeWhen) when a
// fetch begins to wait for work, and when a fetch began at least PokeGap
// after the last poke: so an earlier due time is promoted on time however
// long every worker stays busy (before, it waited for PromoteWait, 30 s), a
// consumer that waits for work finds the waiter watching the wake-up again at
// once, and a busy consumer learns of new work on a parked shard within
// PokeGap, paying at most one poke per PokeGap and shard (a poke at every
// fetch cost a busy consumer of 2 shards a third more Redis time per
// message).
// (Without a promoter a parked waiter waits in the process: it has nothing
// to watch.) A wait that times out marks the shard too, for an AtMostOnce
// queue: nothing re-arms a wake-up lost with a killed consumer there
// (AtLeastOnce has the sweep), so a lost one costs BlockTimeout at most.
type Waiter struct {
	s      *store.Shard
	i      int
	opts   FetchOptions
	fanin  *FanIn
	due    chan<- struct{} // the shard's promoter, or nil
	report func(error)
	poke   string // the consumer's poke key of this shard (internal/store/keys.go)

	// Waited, when set, gets a signal after each wait ends (a test's).
	Waited chan<- struct{}

	lastPoke time.Time // when pokeWhen last set the poke key (its goroutine alone)
}

// PokeGap is the least time between two pokes of a waiter for fetches that
// found work (a fetch that waits for work pokes at once): how stale a busy
// consumer's view of a parked shard may get.
const PokeGap = 50 * time.Millisecond

// waiterGap is the least time between two wake-ups a waiter reports: under
// load every enqueue re-arms the wake-up, and a pop (and a new BZPOPMIN) for
// each would cost a round trip per message. Meanwhile the wake-up's score
// keeps the best priority made ready, so nothing is missed, only learnt up to
// waiterGap later (the inversion rate counts what waits 10 ms).
const waiterGap = 2 * time.Millisecond

// wakeHold is how long a waiter whose consumer is not fetching keeps a
// wake-up before giving it back for a consumer that may be idle: long enough
// for a consumer between two Receives, or with a worker about to free, to
// use it; short enough that an idle consumer beside a busy one picks work up
// within milliseconds.
const wakeHold = 5 * time.Millisecond

// pokeTTL bounds how long a poke left unread (its wait ended otherwise in
// the same instant, or the consumer closed) stays in Redis.
const pokeTTL = time.Minute

// NewWaiter is the wait of fi's consumer on its shard i; due, when not nil,
// is told of an earlier due time (the shard's Promoter.Woken); poke is the
// consumer's poke key of the shard (store.Keys().Poke).
func NewWaiter(fi *FanIn, i int, due chan<- struct{}, poke string) *Waiter {
	return &Waiter{s: fi.shards[i], i: i, opts: fi.opts, fanin: fi, due: due, report: fi.report, poke: poke}
}

// Run waits until ctx ends.
func (w *Waiter) Run(ctx context.Context) {
	s, fi := w.s, w.fanin
	// What a wait watches: the wake-up and, when the consumer promotes, the
	// sched set first; parked, the sched set and the poke key (nothing
	// without a promoter).
	sched := w.due != nil
	var last time.Time
	parked := false // it gave a wake-up back: wait for its consumer to fetch
	for ctx.Err() == nil {
		wake, poke := true, ""
		var began <-chan struct{} // set: a parked wait, which a fetch that begins pokes
		if parked {
			parked = false
			if fetching, b := fi.fetchState(); !fetching {
				if !sched {
					t := time.NewTimer(w.opts.BlockTimeout)
					select {
					case <-b:
					case <-t.C:
					case <-ctx.Done():
					}
					t.Stop()
					continue
				}
				wake, poke, began = false, w.poke, b
			}
		}
		if gap := waiterGap - time.Since(last); gap > 0 && !sleepCtx(ctx, gap) {
			return
		}
		last = time.Now()
		var stopPoke func()
		if began != nil {
			stopPoke = w.pokeWhen(began)
		}
		wctx, cancel := context.WithTimeout(ctx, w.opts.BlockTimeout+store.BlockMargin)
		got, err := s.WaitAny(wctx, sched, wake, poke, w.opts.BlockTimeout)
		cancel()
		if stopPoke != nil {
			stopPoke()
		}
		signal(w.Waited)
		switch {
		case err != nil && ctx.Err() != nil:
			// Cancelling closed the connection; a member popped in that
			// instant would be lost, so put one back (the promoter puts its
			// own back as it stops).
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.PutWake(rctx, "-inf")
			cancel()
			return
		case s.ClosedUnder(err):
			// The Cluster client closed the pool under the wait: wait again
			// on the pool it has now. The wake-up may have been popped.
			fi.raise(w.i, hintUnknown)
		case err != nil:
			// The wake-up may have been popped into the failed call: what
			// the shard holds is not known any more. (A slot moving is
			// routine: not reported.)
			if !store.MovedAway(err) {
				w.report(fmt.Errorf("prioq: wait on %q: %w", s.Name(), err))
			}
			fi.raise(w.i, hintUnknown)
			sleepCtx(ctx, w.opts.RetryInterval)
		case !got.Wake && !got.Sched && !got.Poke:
			if s.Config().Mode == store.AtMostOnce {
				fi.raise(w.i, hintUnknown)
			}
		case got.Sched:
			select {
			case w.due <- struct{}{}:
			default:
			}
			// Parked, it stays so until its consumer fetches: the wake-up
			// it gave back is still another consumer's to take.
			parked = began != nil
		case got.Poke:
			// Its consumer began a fetch: watch the wake-up again.
		default:
			fi.raise(w.i, wakePriority(got.Score))
			if fetching, began := fi.fetchState(); !fetching {
				// Kept if the consumer fetches within wakeHold (between two
				// Receives, say), else given back.
				t := time.NewTimer(wakeHold)
				select {
				case <-began:
				case <-t.C:
					w.giveBack(ctx, got.Score)
					parked = true
				case <-ctx.Done():
					w.giveBack(ctx, got.Score)
				}
				t.Stop()
			}
		}
	}
}

// pokeWhen sets the waiter's poke key, ending the parked wait that watches
// it, once its consumer needs the waiter to watch the wake-up again: at once
// when a fetch begins to wait for work, and when a fetch began (began
// closed) no sooner than PokeGap after the last poke; until stop is called,
// which returns once no poke is in flight. A poke is a hint: one that fails
// leaves the wait to end at BlockTimeout, as when nothing watched.
func (w *Waiter) pokeWhen(began <-chan struct{}) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	idle := w.fanin.idleState()
	go func() {
		defer close(exited)
		select {
		case <-began:
		case <-idle:
		case <-done:
			return
		}
		if gap := PokeGap - time.Since(w.lastPoke); gap > 0 {
			t := time.NewTimer(gap)
			select {
			case <-t.C:
			case <-idle:
			case <-done:
				t.Stop()
				return
			}
			t.Stop()
		}
		w.lastPoke = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = w.s.Poke(ctx, w.poke, pokeTTL)
	}()
	return func() {
		close(done)
		<-exited
	}
}

// giveBack puts a wake-up of score back (LT: a better one set meanwhile
// stays), for a consumer that waits for work.
func (w *Waiter) giveBack(ctx context.Context, score string) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second) // Close waits for it
	defer cancel()
	if err := w.s.PutWake(pctx, score); err != nil {
		w.report(fmt.Errorf("prioq: wait on %q: giving a wake-up back: %w", w.s.Name(), err))
	}
}
