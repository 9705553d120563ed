package consume

import (
	"context"
	"fmt"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// PromoterOptions configure a Promoter (the root's ConsumerConfig holds them).
type PromoterOptions struct {
	// Wait is how long one wait on the sched marker lasts, and how often the
	// next due time is read again. 0: DefaultPromoteWait.
	Wait time.Duration
	// RetryInterval is the pause after a failed call. 0: DefaultRetryInterval.
	RetryInterval time.Duration
	// Promoted, when set, gets a signal after every promotion (a test's).
	Promoted chan<- struct{}
}

// The defaults of the loops' options (the root's of the same names: a root
// test keeps them equal).
const (
	DefaultPromoteWait   = 30 * time.Second
	DefaultRetryInterval = 500 * time.Millisecond
)

func (o PromoterOptions) withDefaults() PromoterOptions {
	if o.Wait <= 0 {
		o.Wait = DefaultPromoteWait
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	return o
}

// Promoter keeps a queue's delayed messages moving: it sleeps on a
// client-side timer until the next due time (a Redis blocking timeout is only
// precise to ~100 ms at the default hz 10), for as long as the server's reply
// says is left, so the host's wall clock plays no part, and is woken early by
// the sched marker, which an enqueue pushes when it schedules a message
// earlier than the current head. Several promoters (one per consumer) may run
// against one queue: promotion is atomic, so they never move a message twice.
//
// Every call has a deadline, so a call that hangs (a half-open connection, a
// pool replaced by a Sentinel failover) fails at its deadline and the loop
// goes on. Idle cost: one BLPOP and the reads of the next due time (a
// ZRANGE each of the delayed set, the groups' due times in AtLeastOnce and
// the schedules' next fire times) per Wait and, in AtMostOnce (which has no
// sweeper), a KeepMeta every few of those. Schedules (store/schedules.go)
// are fired inside Promote: their next fire time is a due time like a
// delayed message's.
type Promoter struct {
	S         *store.Shard
	Opts      PromoterOptions
	Report    func(error)
	KeepsMeta bool // the queue's meta key is its to keep (shard 0, AtMostOnce)

	// Woken, for a queue of several shards, is how the consumer's one wait
	// on the shard (Waiter, which watches the shard's sched set beside its
	// wake-up set) says an earlier due time was scheduled; the promoter then
	// does not block itself, and re-reads the next due time every Wait.
	Woken <-chan struct{}
}

// Run promotes until ctx ends, then puts the sched marker back.
func (p *Promoter) Run(ctx context.Context) {
	q, o := p.S, p.Opts.withDefaults()
	wake := make(chan bool, 1) // true: marker popped; false: re-read the next due time
	waiterDone := make(chan struct{})
	go func() {
		defer close(waiterDone)
		if p.Woken != nil {
			p.forward(ctx, o, wake)
		} else {
			p.wait(ctx, o, wake)
		}
	}()
	defer func() {
		<-waiterDone
		p.rearm()
	}()

	timer := time.NewTimer(0) // promote once at start: due work may be waiting
	defer timer.Stop()
	// The server's clock, as learned from the last promotion: its now then,
	// and this host's monotonic clock when the reply came.
	var serverMs int64
	var learnedAt time.Time
	for round := 0; ; round++ {
		var promoteNow bool
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			promoteNow = true
		case marker := <-wake:
			promoteNow = marker || learnedAt.IsZero() // no server clock learned yet: promote
		}
		next := time.Duration(-1)
		var err error
		if promoteNow {
			var now int64
			if next, now, err = q.PromoteDue(ctx); err != nil {
				// The server's clock is unknown until a promotion succeeds
				// again: the next wake-up of any kind retries it rather than
				// computing a sleep from a stale clock.
				learnedAt = time.Time{}
			} else {
				serverMs, learnedAt = now, time.Now()
				signal(o.Promoted)
			}
		} else {
			if p.KeepsMeta && round%MetaEvery == 0 && q.Config().Mode == store.AtMostOnce { // AtLeastOnce: the sweeper does it
				q.KeepMeta(ctx, p.Report)
			}
			cctx, cancel := context.WithTimeout(ctx, q.Config().CallTimeout)
			var due int64
			due, err = q.NextDue(cctx)
			cancel()
			if err == nil && due >= 0 {
				next = max(0, time.Duration(due-serverMs)*time.Millisecond-time.Since(learnedAt))
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.Report(err)
			timer.Reset(o.RetryInterval)
			continue
		}
		if next >= 0 {
			timer.Reset(next) // go.mod ≥ 1.23: Reset drops a tick not read yet
		} else {
			timer.Stop()
		}
	}
}

// rearm puts the sched marker back as the promoter stops. A marker it popped
// and had not acted on (popped in the instant before Close, or lost with the
// connection its cancelled wait closed), or an earlier due time that only
// its timer knew, would otherwise be gone, and the other promoters would
// learn of it only at their Wait. At worst one wakes for nothing.
// One round trip with a deadline of its own: Close waits for it.
func (p *Promoter) rearm() {
	q := p.S
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := q.RearmSched(ctx); err != nil {
		p.Report(fmt.Errorf("prioq: promoter of %q: putting the wake-up marker back: %w", q.Name(), err))
	}
}

// forward turns the waiter's signals into wake-ups and sends a re-read of the
// next due time every Wait (what wait's timeouts do).
func (p *Promoter) forward(ctx context.Context, o PromoterOptions, wake chan<- bool) {
	t := time.NewTicker(o.Wait)
	defer t.Stop()
	for {
		marker := false
		select {
		case <-ctx.Done():
			return
		case <-p.Woken:
			marker = true
		case <-t.C:
		}
		select {
		case wake <- marker:
		default:
		}
	}
}

// wait blocks on the sched marker and reports wake-ups and timeouts. After a
// failed wait it asks for the next due time to be read again: a marker may
// have been lost with the connection.
func (p *Promoter) wait(ctx context.Context, o PromoterOptions, wake chan<- bool) {
	q := p.S
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, o.Wait+store.BlockMargin)
		marker, err := q.WaitSched(wctx, o.Wait)
		cancel()
		if err != nil && q.ClosedUnder(err) {
			marker = true // the marker may have gone with the pool: promote
		} else if err != nil {
			if ctx.Err() != nil {
				return // Run puts a marker back
			}
			p.Report(fmt.Errorf("prioq: promoter of %q: %w", q.Name(), err))
			if !sleepCtx(ctx, o.RetryInterval) {
				return
			}
		}
		select {
		case wake <- marker:
		default:
		}
	}
}
