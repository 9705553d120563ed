package prioq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
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
// priority made ready since (lua/inc/wake.lua arm_wake), or unknown. A fetch takes
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
// timing of its wake-ups, the order Queue.Peek shows (fanInOrder).

// Hints: a priority, or one of these.
const (
	hintUnknown = math.MaxInt64 // nothing known: probe before choosing
	hintEmpty   = math.MinInt64 // nothing ready (or paused), as far as known
)

// fanin is the fetcher's state for a queue of several shards. Only the fetch
// in progress (one at a time) reads and writes hint and rr; waiters raise
// raised.
type fanin struct {
	hint   []int64
	guess  []bool         // hint[i] was raised by a wake-up, not read from the shard
	down   []time.Time    // a shard that failed a call: left alone until then (zero: up)
	err    error          // the last such failure
	raised []atomic.Int64 // the best priority waiters saw made ready since (hintEmpty: none)
	signal chan struct{}  // raised was (capacity 1)
	rr     int            // where the last tie was broken

	// twoChoice (set by the fan-in benchmark only) makes fetches choose as
	// the MultiQueue does: see fetchTwoChoice.
	twoChoice bool

	mu       sync.Mutex    // guards the three below, which waiters read
	fetching bool          // a fetch is in progress
	began    chan struct{} // closed when a fetch begins (then replaced)
	idle     chan struct{} // closed when a fetch begins to wait for work (then replaced)
}

// fetchState says whether a fetch is in progress, and gives a channel closed
// when the next one begins.
func (fi *fanin) fetchState() (bool, <-chan struct{}) {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	return fi.fetching, fi.began
}

// idleState gives a channel closed when a fetch next begins to wait for
// work (awaitWork): the moment a parked waiter must watch the wake-up again
// at once (pokeWhen).
func (fi *fanin) idleState() <-chan struct{} {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	return fi.idle
}

// waitsForWork says that the fetch in progress found nothing and waits.
func (fi *fanin) waitsForWork() {
	fi.mu.Lock()
	close(fi.idle)
	fi.idle = make(chan struct{})
	fi.mu.Unlock()
}

// fetchBegins marks a fetch in progress until the returned func is called.
func (fi *fanin) fetchBegins() (ends func()) {
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

func newFanin(shards int) *fanin {
	f := &fanin{hint: make([]int64, shards), guess: make([]bool, shards), down: make([]time.Time, shards), raised: make([]atomic.Int64, shards), signal: make(chan struct{}, 1), began: make(chan struct{}), idle: make(chan struct{})}
	for i := range f.hint {
		f.hint[i] = hintUnknown
		f.raised[i].Store(hintEmpty)
	}
	return f
}

// raise says shard i now holds work of priority p (hintUnknown: of some
// priority).
func (fi *fanin) raise(i int, p int64) {
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
func (fi *fanin) applyRaised() {
	for i := range fi.raised {
		if p := fi.raised[i].Swap(hintEmpty); p != hintEmpty && fi.down[i].IsZero() && p > fi.hint[i] {
			fi.hint[i], fi.guess[i] = p, p != hintUnknown
		}
	}
}

// set records what shard i was found to hold: a hint that is no guess.
func (fi *fanin) set(i int, h int64) { fi.hint[i], fi.guess[i] = h, false }

// markDown leaves shard i alone for retry after a call on it failed with
// err: its hint reads empty, so the others are served meanwhile.
func (fi *fanin) markDown(i int, retry time.Duration, err error) {
	fi.set(i, hintEmpty)
	fi.down[i], fi.err = time.Now().Add(retry), err
}

// upAgain makes the shards whose time alone has passed unknown again, to be
// probed, and returns how long until the next one's does (0: none is down)
// and the last failure when every shard is down.
func (fi *fanin) upAgain(now time.Time) (next time.Duration, allDown error) {
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
	if shard >= 0 && next == top {
		fi.rr = shard
	}
	return shard, next
}

// guessedTie makes unknown (to be probed) the guessed hints tied at the
// best, and reports whether there were any: a tie is broken on hints read
// from the shards alone, so that a stale guess cannot take a turn.
func (fi *fanin) guessedTie() bool {
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

// fetchFanIn is the fetch of a queue of several shards: learn what is not
// known, take from the best shard, and wait for any shard's wake-up when all
// are empty (while a caller still wants the result).
// A fetch of several fills its batch shard after shard, each take no lower
// than the best the other shards hold, so the batch stays in order.
func (f *fetcher) fetchFanIn(n int) ([]*Message, error) {
	fi := f.fanin
	defer fi.fetchBegins()()
	if fi.twoChoice {
		return f.fetchTwoChoice(n)
	}
	// A shard whose call fails (its primary down, failing over) is reported
	// and left alone for RetryInterval while the others are served; the
	// fetch fails only when every shard is.
	var out []*Message
	for len(out) < n {
		retry, allDown := fi.upAgain(time.Now())
		if allDown != nil && len(out) == 0 {
			return nil, allDown
		}
		fi.applyRaised()
		f.probeUnknown()
		if fi.guessedTie() {
			continue // probed, then chosen again
		}
		i, next := fi.best()
		if i < 0 {
			if len(out) > 0 {
				return out, nil
			}
			if !f.stillWanted() {
				return nil, nil
			}
			if err := f.awaitWork(retry); err != nil {
				return nil, err
			}
			continue
		}
		msgs, err := f.takeAtLeast(i, n-len(out), next)
		out = append(out, msgs...)
		if err != nil {
			// A shard whose slot is moving is left alone as one that
			// fails, unreported: a resharding is routine.
			if !store.MovedAway(err) {
				f.report(err)
			}
			fi.markDown(i, f.cfg.RetryInterval, err)
		}
	}
	return out, nil
}

// awaitWork waits for a waiter to report work, at most BlockTimeout, or
// until (when not 0).
func (f *fetcher) awaitWork(until time.Duration) error {
	d := f.cfg.BlockTimeout
	if until > 0 {
		d = min(d, until)
	}
	f.fanin.waitsForWork()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.fanin.signal:
	case <-t.C:
	case <-f.bg.Done():
		return ErrClosed
	}
	return nil
}

// fetchTwoChoice chooses as the MultiQueue does (Rihani, Sanders and
// Dementiev 2015; Williams and Sanders 2025): ask two shards drawn at random
// for their best priority, and take from the better what it holds of that
// priority, with no memory of earlier replies. It is the published baseline that the fan-in
// benchmark (BenchmarkFanInInversions) compares fetchFanIn's hints with, and
// serves no other purpose.
func (f *fetcher) fetchTwoChoice(n int) ([]*Message, error) {
	for {
		for range 2 * len(f.shards) {
			i := rand.IntN(len(f.shards))
			j := (i + 1 + rand.IntN(len(f.shards)-1)) % len(f.shards)
			var ti, tj int64
			var ei, ej error
			done := make(chan struct{})
			go func() {
				defer close(done)
				ctx, cancel := context.WithTimeout(context.Background(), f.shards[j].Config().CallTimeout)
				defer cancel()
				tj, ej = top(ctx, f.shards[j])
			}()
			ctx, cancel := context.WithTimeout(context.Background(), f.shards[i].Config().CallTimeout)
			ti, ei = top(ctx, f.shards[i])
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
			if msgs, err := f.takeAtLeast(i, n, ti); len(msgs) > 0 || err != nil {
				return msgs, err
			}
		}
		if !f.stillWanted() {
			return nil, nil
		}
		if err := f.awaitWork(0); err != nil {
			return nil, err
		}
	}
}

// probeUnknown asks every shard of unknown hint its best priority (top.lua),
// the shards at once; a shard it cannot ask is reported and left alone.
func (f *fetcher) probeUnknown() {
	fi := f.fanin
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
		ctx, cancel := context.WithTimeout(context.Background(), f.shards[unknown[j]].Config().CallTimeout)
		defer cancel()
		tops[j], errs[j] = top(store.WithRedirectBudget(ctx, store.RedirectBudget), f.shards[unknown[j]])
	})
	for j, i := range unknown {
		if errs[j] != nil {
			if !store.MovedAway(errs[j]) {
				f.report(errs[j])
			}
			fi.markDown(i, f.cfg.RetryInterval, errs[j])
			continue
		}
		fi.set(i, tops[j])
	}
}

// takeAtLeast takes up to n messages from shard i, of priority next or
// better (next: the best hint of the other shards), and records what the
// shard holds after it.
func (f *fetcher) takeAtLeast(i, n int, next int64) ([]*Message, error) {
	s, fi := f.shards[i], f.fanin
	a := store.TakeArgs{Lanes: s.Keys().HighFirst(), N: n, Top: true, Guess: true}
	if s.Config().Mode == store.AtLeastOnce {
		a.Lease = f.cfg.Lease
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
		f.report(err)
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
	return messagesOf(r.Deliveries), nil
}

// top is the best priority of shard s's ready messages, hintEmpty when
// none or paused. One round trip.
func top(ctx context.Context, s *store.Shard) (int64, error) {
	p, ok, err := s.Top(ctx)
	if err != nil || !ok {
		return hintEmpty, err
	}
	return p, nil
}

// wakePriority reads the wake-up's score: the best priority made ready, or
// hintUnknown when that is not known.
func wakePriority(score string) int64 {
	if p, ok := store.WakePriority(score); ok {
		return p
	}
	return hintUnknown
}

// waiter is a consumer's one blocking wait on a shard of a queue of several
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
// fetch begins to wait for work, and when a fetch began at least pokeGap
// after the last poke: so an earlier due time is promoted on time however
// long every worker stays busy (before, it waited for PromoteWait, 30 s), a
// consumer that waits for work finds the waiter watching the wake-up again at
// once, and a busy consumer learns of new work on a parked shard within
// pokeGap, paying at most one poke per pokeGap and shard (a poke at every
// fetch cost a busy consumer of 2 shards a third more Redis time per
// message).
// (Without a promoter a parked waiter waits in the process: it has nothing
// to watch.) A wait that times out marks the shard too, for an AtMostOnce
// queue: nothing re-arms a wake-up lost with a killed consumer there
// (AtLeastOnce has the sweep), so a lost one costs BlockTimeout at most.
type waiter struct {
	s      *store.Shard
	i      int
	cfg    *ConsumerConfig
	fanin  *fanin
	due    chan<- struct{} // the shard's promoter, or nil
	report func(error)
	poke   string // the consumer's poke key of this shard (internal/store/keys.go)

	lastPoke time.Time // when pokeWhen last set the poke key (its goroutine alone)
}

// pokeGap is the least time between two pokes of a waiter for fetches that
// found work (a fetch that waits for work pokes at once): how stale a busy
// consumer's view of a parked shard may get.
const pokeGap = 50 * time.Millisecond

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

func (w *waiter) run(ctx context.Context) {
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
					t := time.NewTimer(w.cfg.BlockTimeout)
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
		wctx, cancel := context.WithTimeout(ctx, w.cfg.BlockTimeout+store.BlockMargin)
		got, err := s.WaitAny(wctx, sched, wake, poke, w.cfg.BlockTimeout)
		cancel()
		if stopPoke != nil {
			stopPoke()
		}
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
			sleepCtx(ctx, w.cfg.RetryInterval)
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
// closed) no sooner than pokeGap after the last poke; until stop is called,
// which returns once no poke is in flight. A poke is a hint: one that fails
// leaves the wait to end at BlockTimeout, as when nothing watched.
func (w *waiter) pokeWhen(began <-chan struct{}) (stop func()) {
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
		if gap := pokeGap - time.Since(w.lastPoke); gap > 0 {
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
func (w *waiter) giveBack(ctx context.Context, score string) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second) // Close waits for it
	defer cancel()
	if err := w.s.PutWake(pctx, score); err != nil {
		w.report(fmt.Errorf("prioq: wait on %q: giving a wake-up back: %w", w.s.Name(), err))
	}
}
