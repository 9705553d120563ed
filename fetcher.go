package prioq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// fetcher serves a consumer's Receive, ReceiveBatch and Run with one fetch in
// progress at a time, however many goroutines ask: the fetch runs in its own
// goroutine and parks what it got in held, where the next caller finds it.
// Callers wait on the fetch or their own ctx, whichever ends first, so a
// caller that gives up takes nothing, and nothing already taken is dropped.
type fetcher struct {
	shards      []*store.Shard
	s           *store.Shard    // shards[0]: the queue's one shard, when it has one
	fanin       *fanin          // a queue of several shards (fanin.go), else nil
	cfg         *ConsumerConfig // its consumer's
	bg          context.Context // its consumer's: ends on Close
	report      func(error)
	callTimeout time.Duration
	multi       *multi // a MultiConsumer's (multi.go), else nil

	mu      sync.Mutex
	held    []*Message    // fetched but not handed out yet: one fetch's messages
	heldAt  time.Time     // when that fetch put them there
	running chan struct{} // closed when the fetch in progress ends; nil if none
	err     error         // the last fetch's error, for the next caller
	waiting int           // callers waiting on the fetch in progress
	closed  bool

	// broken holds the lane keys found holding the wrong type (AtMostOnce:
	// a blocking pop fails on them, so it pops from the others). Used only
	// by the fetch in progress, one at a time.
	broken map[string]bool

	// releasing counts the give-backs of kept messages (receive) still in
	// flight, for Close to wait for.
	releasing sync.WaitGroup
}

// keptLeaseShare bounds how long a leased message may wait in held for a
// later Receive: while less than 1/keptLeaseShare of its lease has passed
// since its fetch ended, it is handed out as it is; after that it is given
// back (release.lua: to the head of its lane, this delivery not counted,
// or nothing if the lease is gone) and the Receive takes again.
//
// Why a tenth: a message waits in held only when the Receive that started
// its fetch gave up (its ctx ended), and the lease kept running meanwhile.
// Handed out late, it reaches its handler with less time than a fresh take
// gives (Run ends the handler's context at the lease), and once the lease
// has ended the sweep may already have delivered it to another consumer:
// the kept copy would then run beside the redelivery (two handlers of a
// concurrency-1 group at once). A handler is sized to its Lease; a tenth
// leaves it at least 90% of it. The common case (Receive in a loop with a
// short ctx, the next call at once) hands the message out within
// microseconds, and the price of a message kept longer is two round trips
// (the give-back and the take), which also let the take serve work of a
// higher priority that came meanwhile. Extending the kept lease instead
// would cost one round trip, but hand out a message that may no longer be
// the best one ready.
const keptLeaseShare = 10

// staleHeld removes from held, and returns, the leased messages that may
// not be handed out any more (see keptLeaseShare), and those whose lease
// has ended by this host's clock (a take slower than the lease). Callers
// hold f.mu.
func (f *fetcher) staleHeld(now time.Time) []*Message {
	kept := now.Sub(f.heldAt)
	var stale []*Message
	fresh := f.held[:0:0]
	for _, m := range f.held {
		if deadline := m.LeaseDeadline(); !deadline.IsZero() && (kept*keptLeaseShare > f.cfg.Lease || !now.Before(deadline)) {
			stale = append(stale, m)
		} else {
			fresh = append(fresh, m)
		}
	}
	if len(stale) > 0 {
		f.held = fresh
	}
	return stale
}

// releaseKept gives back leased messages kept too long (staleHeld), with a
// deadline of its own, and waits for it until ctx ends (the give-back goes
// on after that; Close waits for it). A give-back that fails leaves the
// messages to their leases: the sweep delivers them again when they end.
func (f *fetcher) releaseKept(ctx context.Context, stale []*Message) error {
	f.releasing.Add(1)
	done := make(chan struct{})
	go func() {
		defer f.releasing.Done()
		defer close(done)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.callTimeout)
		defer cancel()
		for s, group := range byShard(stale) {
			if _, err := s.Release(rctx, tokensOf(group)); err != nil {
				f.report(fmt.Errorf("prioq: receive from %q: giving back %d messages kept past a tenth of their lease: %w",
					s.Name(), len(group), err))
			}
		}
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newFetcher(shards []*store.Shard, cfg *ConsumerConfig, bg context.Context, report func(error)) *fetcher {
	f := &fetcher{shards: shards, s: shards[0], cfg: cfg, bg: bg, report: report,
		callTimeout: shards[0].Config().CallTimeout}
	if len(shards) > 1 {
		f.fanin = newFanin(len(shards))
	}
	return f
}

func (f *fetcher) receive(ctx context.Context, n int) ([]*Message, error) {
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return nil, ErrClosed
		}
		if stale := f.staleHeld(time.Now()); len(stale) > 0 {
			f.mu.Unlock()
			if err := f.releaseKept(ctx, stale); err != nil {
				return nil, err
			}
			continue
		}
		if len(f.held) > 0 {
			k := min(n, len(f.held))
			out := append([]*Message(nil), f.held[:k]...)
			f.held = f.held[k:]
			f.mu.Unlock()
			f.releaseIDs(ctx, out)
			return out, nil
		}
		if f.running == nil {
			if err := f.err; err != nil {
				f.err = nil
				f.mu.Unlock()
				return nil, err
			}
			if err := ctx.Err(); err != nil {
				f.mu.Unlock()
				return nil, err
			}
			f.running = make(chan struct{})
			go f.fetch(f.running, n)
		}
		done := f.running
		f.waiting++
		f.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.waiting--
		f.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// popsLanes reports whether the fetch waits in a blocking pop on the lanes
// (AtMostOnce, one shard, not a Range queue of format 4): Close must let
// such a pop end by itself. Every other fetch waits on wake-ups.
func (f *fetcher) popsLanes() bool {
	return f.multi == nil && f.fanin == nil && f.s.Config().Mode == store.AtMostOnce && !f.s.Lists()
}

// stillWanted reports whether anyone waits for the fetch in progress.
func (f *fetcher) stillWanted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting > 0 && !f.closed
}

// close stops new fetches. It returns the fetch in progress (nil if none) and
// whether this was the first call.
func (f *fetcher) close() (running chan struct{}, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, false
	}
	f.closed = true
	return f.running, true
}

// takeHeld empties held, for Close to give the messages back.
func (f *fetcher) takeHeld() []*Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := f.held
	f.held = nil
	return held
}

// fetch runs one fetch and parks its result in held / err. It does not use the
// caller's context: abandoning a blocking pop would close its connection, and
// a message popped in that instant would be lost. Each fetch ends by itself
// within BlockTimeout, or at its calls' deadlines when Redis does not answer.
func (f *fetcher) fetch(done chan struct{}, n int) {
	c := f
	var msgs []*Message
	var err error
	switch {
	case f.multi != nil:
		msgs, err = f.multi.fetch(f, n)
	case f.fanin != nil:
		msgs, err = f.fetchFanIn(n)
	case f.s.Config().Mode == store.AtLeastOnce:
		msgs, err = f.fetchLeased(n, f.cfg.Lease)
	case f.s.Lists():
		// No blocking pop takes a Range (format 4) message: wait on the
		// wake-up, take with take.lua and no lease.
		msgs, err = f.fetchLeased(n, 0)
	default:
		msgs, err = f.fetchPopped(n)
	}
	f.mu.Lock()
	if f.closed {
		// Close is waiting for this fetch, or stopped waiting (its ctx ended
		// first): give back what it took and what was still held before
		// saying the fetch is over, so that a Close that sees it end returns
		// only once they are back.
		giveBack := append(f.held, msgs...)
		f.held = nil
		f.mu.Unlock()
		if len(giveBack) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), f.callTimeout)
			if err := f.giveBack(ctx, giveBack); err != nil {
				c.report(err)
			}
			cancel()
		}
		f.mu.Lock()
	} else if len(msgs) > 0 {
		f.held = append(f.held, msgs...)
		f.heldAt = time.Now()
	}
	if err != nil && c.bg.Err() == nil {
		f.err = err
	}
	f.running = nil
	close(done)
	f.mu.Unlock()
}

// laneOrder returns the lane keys in the order to serve them this fetch:
// the queue's fixed highest-first list, or a weighted draw.
func (f *fetcher) laneOrder() []string {
	c, lanes := f, f.s.Keys().Lanes()
	if c.cfg.Weights == nil {
		return f.s.Keys().HighFirst()
	}
	n := len(lanes)
	order := make([]string, 0, n)
	// Weighted draw without replacement, then the zero-weight lanes, highest first.
	w := append([]int(nil), c.cfg.Weights...)
	total := 0
	for _, x := range w {
		total += x
	}
	for total > 0 {
		r := rand.IntN(total)
		for i := n - 1; i >= 0; i-- {
			if r < w[i] {
				order = append(order, lanes[i])
				total -= w[i]
				w[i] = 0
				break
			}
			r -= w[i]
		}
	}
	for i := n - 1; i >= 0; i-- {
		if c.cfg.Weights[i] == 0 {
			order = append(order, lanes[i])
		}
	}
	return order
}

// fetchPopped is the AtMostOnce fetch: one multi-key blocking pop over the
// lanes in serving order. Redis serves the first non-empty key, which is what
// makes the order strict, and hands each element to exactly one waiting client.
// A lane key of the wrong type fails the pop before it pops anything: the
// fetch then finds which lanes are broken, reports them, and pops from the
// others (looking at the broken ones again on every later fetch, so a mended
// lane is served again).
func (f *fetcher) fetchPopped(n int) ([]*Message, error) {
	q := f.s
	if len(f.broken) > 0 {
		if err := f.findBroken(); err != nil {
			return nil, fmt.Errorf("prioq: receive from %q: %w", q.Name(), err)
		}
	}
	ds, err := f.pop(n)
	if store.IsWrongType(err) {
		if ferr := f.findBroken(); ferr != nil {
			return nil, fmt.Errorf("prioq: receive from %q: %w", q.Name(), ferr)
		}
		if len(f.broken) > 0 {
			ds, err = f.pop(n)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("prioq: receive from %q: %w", q.Name(), err)
	}
	return messagesOf(ds), nil
}

// pop is fetchPopped's blocking pop over the lanes not known to be broken
// (store's PopLanes: with a deadline of its own, as abandoning a blocking
// pop early would close its connection, and a message popped in that
// instant would be lost). An entry that did not decode is reported:
// nowhere to report it but OnError, at-most-once has no dead letters.
func (f *fetcher) pop(n int) ([]*store.Delivery, error) {
	keys := f.laneOrder()
	if len(f.broken) > 0 {
		keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return f.broken[k] })
		if len(keys) == 0 {
			return nil, fmt.Errorf("%w: every lane key holds the wrong type", ErrCorrupt)
		}
	}
	ds, dropped, err := f.s.PopLanes(keys, n, f.cfg.BlockTimeout)
	for _, d := range dropped {
		f.report(d)
	}
	return ds, err
}

// findBroken asks the type of every lane key in one round trip and records
// which ones hold the wrong type, reporting each newly broken one.
func (f *fetcher) findBroken() error {
	q := f.s
	ctx, cancel := context.WithTimeout(context.Background(), q.Config().CallTimeout)
	defer cancel()
	types, want, err := q.WrongLanes(ctx)
	if err != nil {
		return err
	}
	broken := make(map[string]bool)
	for _, k := range q.Keys().Lanes() { // in lane order: reported so
		typ, ok := types[k]
		if !ok {
			continue
		}
		broken[k] = true
		if !f.broken[k] {
			f.report(fmt.Errorf("prioq: receive from %q: %w: lane %s is a %s, not a %s: its messages wait until it is mended",
				q.Name(), ErrCorrupt, k, typ, want))
		}
	}
	f.broken = broken
	return nil
}

// fetchLeased is the AtLeastOnce fetch: take (pop + lease in one script); when
// nothing is ready, block on the wake-up marker until work may be there, then
// take again. A wait that times out is simply repeated, without a take, while
// a caller still wants the result: an idle consumer sends one command per
// BlockTimeout. (A marker lost with a killed consumer is re-armed by the lease
// sweep, so waiting instead of polling never strands ready work.) Waiting uses
// the consumer's background context, so Close interrupts it at once: the
// marker is only a hint, and a marker lost with the closed connection is put
// back.
//
// With lease 0 it is the AtMostOnce fetch of a Range queue of format 4: the
// same, without leases; with no sweep to re-arm a wake-up lost with a killed
// consumer, a wait that times out takes too (one script per BlockTimeout per
// idle consumer).
func (f *fetcher) fetchLeased(n int, lease time.Duration) ([]*Message, error) {
	c, q := f, f.s
	takeOnce := func() store.Taken {
		if c.cfg.Weights == nil {
			// The queue's fixed order: merged with its other consumers' takes.
			return q.TakeShared(c.bg, n, lease)
		}
		// Not derived from c.bg: a take abandoned by Close would lease a
		// message nobody holds until its lease ran out. It ends by itself.
		ctx, cancel := context.WithTimeout(context.Background(), q.Config().CallTimeout)
		defer cancel()
		r, err := q.Take(ctx, store.TakeArgs{Lanes: f.laneOrder(), N: n, Lease: lease})
		return store.Taken{Deliveries: r.Deliveries, Limited: r.Limited, Dropped: r.Dropped, Err: err}
	}
	// take is takeOnce, and while the queue is at its rate limit, a sleep
	// until its next message may be taken (at most BlockTimeout, so that a
	// raised limit is seen, and only while a caller still wants the result)
	// and a take again: the take says when, so this is no polling.
	//
	// The wake-up this consumer may have popped stays with it while it
	// sleeps (the others need not wake to find the queue at its limit), and
	// is put back when it gives up: closed, or wanted by nobody.
	take := func() ([]*Message, error) {
		for {
			r := takeOnce()
			for _, d := range r.Dropped {
				// Nowhere to report it but OnError: AtMostOnce has no dead letters.
				c.report(d)
			}
			if r.Err != nil || len(r.Deliveries) > 0 || r.Limited <= 0 {
				return messagesOf(r.Deliveries), r.Err
			}
			t := time.NewTimer(min(r.Limited, c.cfg.BlockTimeout))
			select {
			case <-t.C:
			case <-c.bg.Done():
				t.Stop()
				f.rearmWake()
				return nil, ErrClosed
			}
			if !f.stillWanted() {
				f.rearmWake()
				return nil, nil
			}
		}
	}
	msgs, err := take()
	if err != nil || len(msgs) > 0 {
		return msgs, err
	}
	for {
		ctx, cancel := context.WithTimeout(c.bg, c.cfg.BlockTimeout+store.BlockMargin)
		woken, err := q.WaitWake(ctx, c.cfg.BlockTimeout)
		cancel()
		if err != nil {
			if c.bg.Err() != nil {
				f.rearmWake()
				return nil, ErrClosed
			}
			if q.ClosedUnder(err) {
				return take() // the wake-up may have gone with the pool
			}
			return nil, fmt.Errorf("prioq: wait on %q: %w", q.Name(), err)
		}
		if woken {
			return take()
		}
		if lease == 0 {
			if msgs, err := take(); err != nil || len(msgs) > 0 {
				return msgs, err
			}
		}
		if !f.stillWanted() {
			return nil, nil
		}
	}
}

// rearmWake puts the wake-up member back (a hint: at worst a consumer wakes
// for nothing), for a fetch that gives up on the work it may have been woken
// for.
func (f *fetcher) rearmWake() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = f.s.RearmWake(ctx)
}

// releaseIDs frees the caller ids of AtMostOnce messages as they are handed
// out: from then on the message exists only in this process, and its id may
// be enqueued again. (Held, not handed out, it keeps the id: Close gives it
// back.) It runs with ctx, one call per shard; if ctx ends first, the release
// (an idempotent SREM) goes on with a deadline of its own after the messages
// are returned. If that fails too, the id stays taken until Purge; the error
// goes to OnError.
func (f *fetcher) releaseIDs(ctx context.Context, msgs []*Message) {
	// A consumer's messages share one mode (a MultiConsumer's: AtLeastOnce).
	if len(msgs) == 0 || msgs[0].shard().Config().Mode != store.AtMostOnce {
		return
	}
	for s, group := range byShard(msgs) {
		var ids []string
		for _, m := range group {
			if m.d.CallerID {
				ids = append(ids, m.ID)
			}
		}
		if len(ids) > 0 {
			f.releaseIDsOf(ctx, s, ids)
		}
	}
}

func (f *fetcher) releaseIDsOf(ctx context.Context, s *store.Shard, ids []string) {
	release := func(ctx context.Context) error { return s.ReleaseIDs(ctx, ids) }
	if ctx.Err() == nil {
		if err := release(ctx); err == nil || ctx.Err() == nil {
			if err != nil {
				f.report(fmt.Errorf("prioq: receive from %q: releasing ids: %w", s.Name(), err))
			}
			return
		}
	}
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.Config().CallTimeout)
		defer cancel()
		if err := release(rctx); err != nil {
			f.report(fmt.Errorf("prioq: receive from %q: releasing ids: %w", s.Name(), err))
		}
	}()
}

// byShard groups messages by the shard they came from, keeping their order.
func byShard(msgs []*Message) map[*store.Shard][]*Message {
	out := make(map[*store.Shard][]*Message, 1)
	for _, m := range msgs {
		out[m.shard()] = append(out[m.shard()], m)
	}
	return out
}

// tokensOf are the lease tokens of msgs.
func tokensOf(msgs []*Message) []string {
	tokens := make([]string, len(msgs))
	for i, m := range msgs {
		tokens[i] = m.token()
	}
	return tokens
}

// giveBack gives held messages back, one round trip per shard they came
// from: AtLeastOnce ones with release.lua (not a write that WAITs for
// replicas: it acknowledges nothing), AtMostOnce ones to the head of their
// lanes in one pipeline. An AtMostOnce message held keeps its caller id
// reserved until it is handed out (see fetcher.receive), so putting it back
// needs no id.
func (f *fetcher) giveBack(ctx context.Context, held []*Message) error {
	var errs []error
	for s, group := range byShard(held) {
		if err := f.giveBackTo(ctx, s, group); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (f *fetcher) giveBackTo(ctx context.Context, q *store.Shard, held []*Message) error {
	if q.Config().Mode == store.AtLeastOnce {
		if _, err := q.Release(ctx, tokensOf(held)); err != nil {
			return fmt.Errorf("prioq: close consumer of %q: %w", q.Name(), err)
		}
		return nil
	}
	ds := make([]*store.Delivery, len(held))
	for i, m := range held {
		ds[i] = m.d
	}
	lost, err := q.PutBack(ctx, ds, f.report)
	if len(lost) > 0 {
		msgs := make([]*Message, 0, len(lost))
		for _, m := range held {
			if slices.Contains(lost, m.d) {
				msgs = append(msgs, m)
			}
		}
		f.releaseIDs(ctx, msgs)
	}
	return err
}
