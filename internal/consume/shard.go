package consume

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// ShardSource is the Source of a queue of one shard: an AtLeastOnce take
// (take.lua, merged with the queue's other consumers' takes in flight), an
// AtMostOnce blocking pop on the lanes, or, for a Range queue of format 4,
// an AtMostOnce take; with the wait for a wake-up between takes.
type ShardSource struct {
	s      *store.Shard
	opts   FetchOptions
	bg     context.Context // the consumer's: ends on Close
	report func(error)

	// broken holds the lane keys found holding the wrong type (AtMostOnce:
	// a blocking pop fails on them, so it pops from the others). Used only
	// by the fetch in progress, one at a time.
	broken map[string]bool

	// rides are the acks that ride on its next take (AtLeastOnce, the
	// queue's fixed lane order: TakeShared); nil otherwise.
	rides *Rides
}

// NewShardSource is the source of a consumer of the one shard s.
func NewShardSource(s *store.Shard, opts FetchOptions, bg context.Context, report func(error)) *ShardSource {
	ss := &ShardSource{s: s, opts: opts.withDefaults(), bg: bg, report: report}
	if s.Config().Mode == store.AtLeastOnce && opts.Weights == nil && s.Config().WaitReplicas <= 0 {
		// (With WaitReplicas an ack waits for its replicas, apart from
		// the take: riding would only make it wait for the take too.)
		ss.rides = newRides(s, ss.opts.CallTimeout)
	}
	return ss
}

// RidesOf is where acks may ride on src's next take: nil unless src is a
// ShardSource of an AtLeastOnce queue without Weights nor WaitReplicas. (A sharded queue's
// fan-in and a MultiConsumer take from several shards: their acks go alone.)
func RidesOf(src Source) *Rides {
	if ss, ok := src.(*ShardSource); ok {
		return ss.rides
	}
	return nil
}

// PopsLanes reports whether src's fetch waits in a blocking pop on the lanes
// (AtMostOnce, one shard, not a Range queue of format 4): Close must let
// such a pop end by itself. Every other fetch waits on wake-ups, which Close
// interrupts.
func PopsLanes(src Source) bool {
	ss, ok := src.(*ShardSource)
	return ok && ss.s.Config().Mode == store.AtMostOnce && !ss.s.Lists()
}

// Fetch is the Source's: see ShardSource.
func (ss *ShardSource) Fetch(n int, wanted func() bool) ([]*store.Delivery, error) {
	switch {
	case ss.s.Config().Mode == store.AtLeastOnce:
		return ss.fetchLeased(n, ss.opts.Lease, wanted)
	case ss.s.Lists():
		// No blocking pop takes a Range (format 4) message: wait on the
		// wake-up, take with take.lua and no lease.
		return ss.fetchLeased(n, 0, wanted)
	default:
		return ss.fetchPopped(n)
	}
}

// laneOrder returns the lane keys in the order to serve them this fetch:
// the queue's fixed highest-first list, or a weighted draw.
func (ss *ShardSource) laneOrder() []string {
	lanes, weights := ss.s.Keys().Lanes(), ss.opts.Weights
	if weights == nil {
		return ss.s.Keys().HighFirst()
	}
	n := len(lanes)
	order := make([]string, 0, n)
	// Weighted draw without replacement, then the zero-weight lanes, highest first.
	w := append([]int(nil), weights...)
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
		if weights[i] == 0 {
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
func (ss *ShardSource) fetchPopped(n int) ([]*store.Delivery, error) {
	q := ss.s
	if len(ss.broken) > 0 {
		if err := ss.findBroken(); err != nil {
			return nil, fmt.Errorf("prioq: receive from %q: %w", q.Name(), err)
		}
	}
	ds, err := ss.pop(n)
	if store.IsWrongType(err) {
		if ferr := ss.findBroken(); ferr != nil {
			return nil, fmt.Errorf("prioq: receive from %q: %w", q.Name(), ferr)
		}
		if len(ss.broken) > 0 {
			ds, err = ss.pop(n)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("prioq: receive from %q: %w", q.Name(), err)
	}
	return ds, nil
}

// pop is fetchPopped's blocking pop over the lanes not known to be broken
// (store's PopLanes: with a deadline of its own, as abandoning a blocking
// pop early would close its connection, and a message popped in that
// instant would be lost). An entry that did not decode is reported:
// nowhere to report it but OnError, at-most-once has no dead letters.
func (ss *ShardSource) pop(n int) ([]*store.Delivery, error) {
	keys := ss.laneOrder()
	if len(ss.broken) > 0 {
		keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return ss.broken[k] })
		if len(keys) == 0 {
			return nil, fmt.Errorf("%w: every lane key holds the wrong type", store.ErrCorrupt)
		}
	}
	ds, dropped, err := ss.s.PopLanes(keys, n, ss.opts.BlockTimeout)
	for _, d := range dropped {
		ss.report(d)
	}
	return ds, err
}

// findBroken asks the type of every lane key in one round trip and records
// which ones hold the wrong type, reporting each newly broken one.
func (ss *ShardSource) findBroken() error {
	q := ss.s
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
		if !ss.broken[k] {
			ss.report(fmt.Errorf("prioq: receive from %q: %w: lane %s is a %s, not a %s: its messages wait until it is mended",
				q.Name(), store.ErrCorrupt, k, typ, want))
		}
	}
	ss.broken = broken
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
func (ss *ShardSource) fetchLeased(n int, lease time.Duration, wanted func() bool) ([]*store.Delivery, error) {
	q, o := ss.s, ss.opts
	takeOnce := func() store.Taken {
		if o.Weights == nil {
			// The queue's fixed order: merged with its other consumers'
			// takes, the acks pending riding on it.
			rides := ss.rides.take()
			r := q.TakeShared(ss.bg, n, lease, reqs(rides))
			done(rides, r.AckErrs)
			return r
		}
		// Not derived from bg: a take abandoned by Close would lease a
		// message nobody holds until its lease ran out. It ends by itself.
		ctx, cancel := context.WithTimeout(context.Background(), q.Config().CallTimeout)
		defer cancel()
		r, err := q.Take(ctx, store.TakeArgs{Lanes: ss.laneOrder(), N: n, Lease: lease})
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
	take := func() ([]*store.Delivery, error) {
		for {
			r := takeOnce()
			for _, d := range r.Dropped {
				// Nowhere to report it but OnError: AtMostOnce has no dead letters.
				ss.report(d)
			}
			if r.Err != nil || len(r.Deliveries) > 0 || r.Limited <= 0 {
				return r.Deliveries, r.Err
			}
			ss.rides.Pause()
			t := time.NewTimer(min(r.Limited, o.BlockTimeout))
			select {
			case <-t.C:
			case <-ss.bg.Done():
				t.Stop()
				ss.rearmWake()
				return nil, store.ErrClosed
			}
			if !wanted() {
				ss.rearmWake()
				return nil, nil
			}
		}
	}
	ds, err := take()
	if err != nil || len(ds) > 0 {
		return ds, err
	}
	for {
		ss.rides.Pause() // nothing to take: no take comes soon
		ctx, cancel := context.WithTimeout(ss.bg, o.BlockTimeout+store.BlockMargin)
		woken, err := q.WaitWake(ctx, o.BlockTimeout)
		cancel()
		if err != nil {
			if ss.bg.Err() != nil {
				ss.rearmWake()
				return nil, store.ErrClosed
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
			if ds, err := take(); err != nil || len(ds) > 0 {
				return ds, err
			}
		}
		if !wanted() {
			return nil, nil
		}
	}
}

// rearmWake puts the wake-up member back (a hint: at worst a consumer wakes
// for nothing), for a fetch that gives up on the work it may have been woken
// for.
func (ss *ShardSource) rearmWake() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = ss.s.RearmWake(ctx)
}
