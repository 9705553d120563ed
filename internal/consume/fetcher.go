package consume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// Source is where a Fetcher takes from: one shard (ShardSource), the fan-in
// of a sharded queue (FanIn), or the many queues of a MultiConsumer (the
// root's multi). Fetch takes up to n deliveries and, when none is ready,
// waits for work for as long as wanted() says a caller still wants them
// (nil, nil when nobody does any more). It runs one call at a time, in a
// goroutine of its own, without a caller's context: a take or pop abandoned
// half way could lose what it took. It ends by itself within BlockTimeout,
// or at its calls' deadlines, or when the consumer closes (store.ErrClosed).
type Source interface {
	Fetch(n int, wanted func() bool) ([]*store.Delivery, error)
}

// FetchOptions configure a Fetcher and its Source (the root's ConsumerConfig
// holds them).
type FetchOptions struct {
	// Lease is an AtLeastOnce take's lease (0: AtMostOnce, no lease).
	Lease time.Duration
	// BlockTimeout bounds one wait for work. 0: DefaultBlockTimeout.
	BlockTimeout time.Duration
	// RetryInterval is how long a shard that failed a call is left alone.
	// 0: DefaultRetryInterval.
	RetryInterval time.Duration
	// Weights, when set, draws the lanes' order per take (a queue of one
	// shard only).
	Weights []int
	// CallTimeout is the deadline of the fetcher's own calls (give-backs).
	CallTimeout time.Duration
	// Fetched, when set, gets a signal each time a fetch ends (a test's).
	Fetched chan<- struct{}
}

// DefaultBlockTimeout is FetchOptions.BlockTimeout's default (the root's
// DefaultBlockTimeout: a root test keeps them equal).
const DefaultBlockTimeout = 5 * time.Second

func (o FetchOptions) withDefaults() FetchOptions {
	if o.BlockTimeout <= 0 {
		o.BlockTimeout = DefaultBlockTimeout
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 10 * time.Second
	}
	return o
}

// Fetcher serves a consumer's Receive, ReceiveBatch and Run with one fetch in
// progress at a time, however many goroutines ask: the fetch runs in its own
// goroutine and parks what it got in held, where the next caller finds it.
// Callers wait on the fetch or their own ctx, whichever ends first, so a
// caller that gives up takes nothing, and nothing already taken is dropped.
type Fetcher struct {
	src    Source
	opts   FetchOptions
	bg     context.Context // its consumer's: ends on Close
	report func(error)

	mu      sync.Mutex
	held    []*store.Delivery // fetched but not handed out yet: one fetch's
	heldAt  time.Time         // when that fetch put them there
	running chan struct{}     // closed when the fetch in progress ends; nil if none
	err     error             // the last fetch's error, for the next caller
	waiting int               // callers waiting on the fetch in progress
	closed  bool

	// releasing counts the give-backs of kept messages (Receive) still in
	// flight, for Close to wait for.
	releasing sync.WaitGroup
}

// NewFetcher is the fetcher of a consumer over src; bg ends on its Close.
func NewFetcher(src Source, opts FetchOptions, bg context.Context, report func(error)) *Fetcher {
	return &Fetcher{src: src, opts: opts.withDefaults(), bg: bg, report: report}
}

// Source is what the fetcher takes from.
func (f *Fetcher) Source() Source { return f.src }

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
func (f *Fetcher) staleHeld(now time.Time) []*store.Delivery {
	kept := now.Sub(f.heldAt)
	var stale []*store.Delivery
	fresh := f.held[:0:0]
	for _, d := range f.held {
		if deadline := d.Deadline(); !deadline.IsZero() && (kept*keptLeaseShare > f.opts.Lease || !now.Before(deadline)) {
			stale = append(stale, d)
		} else {
			fresh = append(fresh, d)
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
func (f *Fetcher) releaseKept(ctx context.Context, stale []*store.Delivery) error {
	f.releasing.Add(1)
	done := make(chan struct{})
	go func() {
		defer f.releasing.Done()
		defer close(done)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.opts.CallTimeout)
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

// Receive returns up to n deliveries: held ones, or those of a fetch it
// starts or joins; ctx.Err() when ctx ends first (taking nothing for the
// caller), store.ErrClosed after Close.
func (f *Fetcher) Receive(ctx context.Context, n int) ([]*store.Delivery, error) {
	return f.receive(ctx, n, false)
}

// startFetch starts a fetch of n for a caller with ctx (the fetch runs under
// its profiler labels); callers hold f.mu, and no fetch runs.
func (f *Fetcher) startFetch(ctx context.Context, n int) {
	f.running = make(chan struct{})
	running := f.running
	store.Go(ctx, func() { f.fetch(running, n) })
}

// receive is Receive's loop; started says the caller started the fetch in
// progress, so that what is held after it is its result.
func (f *Fetcher) receive(ctx context.Context, n int, started bool) ([]*store.Delivery, error) {
	waited := started // for a fetch: what is held then is its result
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return nil, store.ErrClosed
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
			out := append([]*store.Delivery(nil), f.held[:k]...)
			f.held = f.held[k:]
			f.mu.Unlock()
			f.releaseIDs(ctx, out)
			if !waited {
				// Kept from an earlier fetch, handed out without a take:
				// the acks waiting for one (Run's, whose slots these
				// messages may fill) go alone rather than wait.
				RidesOf(f.src).Pause()
			}
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
			f.startFetch(ctx, n)
		}
		done := f.running
		f.waiting++
		f.mu.Unlock()
		waited = true
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

// stillWanted reports whether anyone waits for the fetch in progress.
func (f *Fetcher) stillWanted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting > 0 && !f.closed
}

// Close stops new fetches. It returns the fetch in progress (nil if none) and
// whether this was the first call.
func (f *Fetcher) Close() (running <-chan struct{}, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, false
	}
	f.closed = true
	if f.running == nil {
		return nil, true
	}
	return f.running, true
}

// TakeHeld empties held, for Close to give the messages back.
func (f *Fetcher) TakeHeld() []*store.Delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := f.held
	f.held = nil
	return held
}

// WaitReleases waits for the give-backs of kept messages still in flight.
func (f *Fetcher) WaitReleases() { f.releasing.Wait() }

// fetch runs one fetch and parks its result in held / err. It does not use the
// caller's context: abandoning a blocking pop would close its connection, and
// a message popped in that instant would be lost. Each fetch ends by itself
// within BlockTimeout, or at its calls' deadlines when Redis does not answer.
func (f *Fetcher) fetch(done chan struct{}, n int) {
	ds, err := f.src.Fetch(n, f.stillWanted)
	f.mu.Lock()
	if f.closed {
		// Close is waiting for this fetch, or stopped waiting (its ctx ended
		// first): give back what it took and what was still held before
		// saying the fetch is over, so that a Close that sees it end returns
		// only once they are back.
		giveBack := append(f.held, ds...)
		f.held = nil
		f.mu.Unlock()
		if len(giveBack) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), f.opts.CallTimeout)
			if err := f.GiveBack(ctx, giveBack); err != nil {
				f.report(err)
			}
			cancel()
		}
		f.mu.Lock()
	} else if len(ds) > 0 {
		f.held = append(f.held, ds...)
		f.heldAt = time.Now()
	}
	if err != nil && f.bg.Err() == nil {
		f.err = err
	}
	f.running = nil
	close(done)
	f.mu.Unlock()
	signal(f.opts.Fetched)
}

// releaseIDs frees the caller ids of AtMostOnce messages as they are handed
// out: from then on the message exists only in this process, and its id may
// be enqueued again. (Held, not handed out, it keeps the id: Close gives it
// back.) It runs with ctx, one call per shard; if ctx ends first, the release
// (an idempotent SREM) goes on with a deadline of its own after the messages
// are returned. If that fails too, the id stays taken until Purge; the error
// goes to OnError.
func (f *Fetcher) releaseIDs(ctx context.Context, ds []*store.Delivery) {
	// A consumer's messages share one mode (a MultiConsumer's: AtLeastOnce).
	if len(ds) == 0 || ds[0].Shard().Config().Mode != store.AtMostOnce {
		return
	}
	for s, group := range byShard(ds) {
		var ids []string
		for _, d := range group {
			if d.CallerID {
				ids = append(ids, d.ID)
			}
		}
		if len(ids) > 0 {
			f.releaseIDsOf(ctx, s, ids)
		}
	}
}

func (f *Fetcher) releaseIDsOf(ctx context.Context, s *store.Shard, ids []string) {
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

// byShard groups deliveries by the shard they came from, keeping their order.
func byShard(ds []*store.Delivery) map[*store.Shard][]*store.Delivery {
	out := make(map[*store.Shard][]*store.Delivery, 1)
	for _, d := range ds {
		out[d.Shard()] = append(out[d.Shard()], d)
	}
	return out
}

// tokensOf are the lease tokens of ds.
func tokensOf(ds []*store.Delivery) []string {
	tokens := make([]string, len(ds))
	for i, d := range ds {
		tokens[i] = d.Token()
	}
	return tokens
}

// GiveBack gives held messages back, one round trip per shard they came
// from: AtLeastOnce ones with release.lua (not a write that WAITs for
// replicas: it acknowledges nothing), AtMostOnce ones to the head of their
// lanes in one pipeline. An AtMostOnce message held keeps its caller id
// reserved until it is handed out (see Receive), so putting it back needs no
// id.
func (f *Fetcher) GiveBack(ctx context.Context, held []*store.Delivery) error {
	var errs []error
	for s, group := range byShard(held) {
		if err := f.giveBackTo(ctx, s, group); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (f *Fetcher) giveBackTo(ctx context.Context, q *store.Shard, held []*store.Delivery) error {
	if q.Config().Mode == store.AtLeastOnce {
		if _, err := q.Release(ctx, tokensOf(held)); err != nil {
			return fmt.Errorf("prioq: close consumer of %q: %w", q.Name(), err)
		}
		return nil
	}
	lost, err := q.PutBack(ctx, held, f.report)
	if len(lost) > 0 {
		f.releaseIDs(ctx, slices.DeleteFunc(slices.Clone(held), func(d *store.Delivery) bool { return !slices.Contains(lost, d) }))
	}
	return err
}

// State says how many deliveries are held, whether a fetch is running and
// whether Close was called: what a test waits for.
func (f *Fetcher) State() (held int, running, closed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.held), f.running != nil, f.closed
}

// Held is a copy of the deliveries held (a test's look at them).
func (f *Fetcher) Held() []*store.Delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.held)
}

// SetHeld makes ds the deliveries held, kept from now: a test's way to give
// Close something to give back.
func (f *Fetcher) SetHeld(ds []*store.Delivery) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held, f.heldAt = ds, time.Now()
}
