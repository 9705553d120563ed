package prioq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/consume"
	"github.com/prioq/prioq/internal/store"
)

// Handler handles one message. For AtLeastOnce queues, returning nil acks the
// message and returning an error retries it after the queue's backoff (or
// dead-letters it after MaxAttempts); return an error wrapping ErrSkipRetry
// to dead-letter it at once. A handler may also Ack or Retry m itself before
// it returns; Run then leaves it as the handler did. (An Ack still in flight
// in another goroutine when the handler returns races with Run's own: one of
// them gets ErrLeaseLost.) For AtLeastOnce queues Run renews the leases of
// its running handlers (ConsumerConfig.NoRenew), so a handler may run
// longer than Lease. The handler's ctx is cancelled, with its cause
// (context.Cause): when the lease ends unrenewed (ErrLeaseExpired; m.Extend
// moves that moment), when a renewal finds it lost (ErrLeaseLost) or
// cancelled by Queue.Cancel (ErrCancelled), after
// ConsumerConfig.HandlerTimeout (ErrHandlerTimeout), and when Run's grace
// period runs out.
type Handler func(ctx context.Context, m *Message) error

// Middleware wraps a Handler, for work around every delivery of Run:
// tracing, metrics, logging. ConsumerConfig.Middleware applies them, the
// first one outermost; what the outermost returns decides the ack or retry.
type Middleware func(next Handler) Handler

// Run feeds up to Concurrency handlers at once until ctx is done. It fetches
// as many messages per round trip as there are free handlers, through the
// consumer's one fetch at a time (no blocking connection per handler), and in
// AtLeastOnce mode acks in batches: all acks ready together go in one round
// trip. On a queue of one shard (without Weights nor WaitReplicas), the acks
// of handlers that returned nil while Run was about to take again (but those
// of caller ids) ride on that take: acks and take in one round trip, each
// with its own outcome (an ack that lost its lease takes nothing from the
// take, a take that fails fails no ack). A panic in a handler is recovered
// and counts as a failed attempt. A handler runs in a goroutine kept for the
// next one (its stack grown already): leave nothing bound to it behind (a
// runtime.LockOSThread without its Unlock, pprof goroutine labels).
//
// When ctx is done Run stops taking, waits up to GracePeriod for handlers in
// flight, then cancels their contexts and waits for them to return; leases of
// messages whose handlers did not finish expire and those messages are
// delivered again. Run returns ctx.Err() then, or ErrClosed after Close. Run
// does not Close the consumer.
func (c *Consumer) Run(ctx context.Context, h Handler) error {
	for i := len(c.cfg.Middleware) - 1; i >= 0; i-- {
		h = c.cfg.Middleware[i](h)
	}
	slots := make(chan struct{}, c.cfg.Concurrency)
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	var wg sync.WaitGroup
	rides := consume.RidesOf(c.fetcher.Source())
	if c.mode != AtLeastOnce {
		rides = nil
	}
	if rides != nil {
		rides.Open()
	}
	// The renewer keeps the leases of running handlers alive until every
	// handler returned.
	var rn *renewer
	if c.mode == AtLeastOnce && !c.cfg.NoRenew {
		rn = newRenewer(c)
		rctx, rstop := context.WithCancel(context.WithoutCancel(ctx))
		rdone := make(chan struct{})
		go func() { defer close(rdone); rn.run(rctx) }()
		defer func() { rstop(); <-rdone }()
	}
	err := c.feed(ctx, slots, rides, func(m *Message) {
		wg.Add(1)
		store.Go(hctx, func() {
			c.stats.running.Add(1)
			// The slot (and the running count) is freed when the handler's
			// ack rides on the next take, or when it all ends.
			var freed sync.Once
			free := func() { freed.Do(func() { c.stats.running.Add(-1); <-slots }) }
			defer func() { free(); wg.Done() }()
			c.handle(hctx, m, h, runAck{rides: rides, free: free}, rn)
		})
	})
	if rides != nil {
		rides.Close() // no take comes any more: what waits for one is acked alone
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.cfg.GracePeriod):
		hcancel()
		<-done
	}
	return err
}

// feed takes as many messages as there are free slots and starts each, until
// ctx is done (it returns ctx.Err()) or the consumer is closed (ErrClosed).
// A slot is held from before the take until the message's handler returns,
// or its ack rides on the next take (see runAck).
func (c *Consumer) feed(ctx context.Context, slots chan struct{}, rides *consume.Rides, start func(*Message)) error {
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		free := 1
	more:
		for free < c.cfg.Concurrency {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}
		msgs, err := c.ReceiveBatch(ctx, free)
		for i := len(msgs); i < free; i++ {
			<-slots
		}
		// Messages taken are always handled, even if ctx ended meanwhile:
		// an AtMostOnce message exists nowhere else.
		for _, m := range msgs {
			start(m)
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrClosed):
			return err
		default:
			c.report(err)
			rides.Pause() // no take before RetryInterval: acks go alone meanwhile
			if !sleepCtx(ctx, c.cfg.RetryInterval) {
				return ctx.Err()
			}
		}
	}
}

// runAck is how Run acks a message its handler finished: riding on the
// consumer's next take when rides accepts it (a slot freed so that the take
// comes), else alone.
type runAck struct {
	rides *consume.Rides // nil: alone
	free  func()         // frees the handler's slot (once)
}

// ride acks m on the next take, if rides accepts it, and reports whether it
// did; err is the ack's, as Ack's. The handler's slot is freed first: the
// feed then takes, the ack riding on it.
func (a runAck) ride(m *Message) (ok bool, err error) {
	if m.alone() {
		return false, nil // its ack writes a record, or drops a progress (retain.go)
	}
	ch := make(chan error, 1)
	if !a.rides.Offer(consume.Ride{Req: m.d.Req(), Done: func(err error) { ch <- err }}) {
		return false, nil
	}
	a.free()
	err = <-ch
	m.ackedIf(err)
	return true, err
}

func (c *Consumer) handle(base context.Context, m *Message, h Handler, ack runAck, rn *renewer) {
	ctx := base
	var l *leaseCtl
	if !m.LeaseDeadline().IsZero() {
		ctx, l = newLeaseCtl(base, m)
		defer l.stop()
		m.onExtend = l.set
	}
	if c.cfg.HandlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.cfg.HandlerTimeout, ErrHandlerTimeout)
		defer cancel()
	}
	if l != nil && rn != nil {
		// Renewed while the handler's context lives: a handler that
		// ignores its timeout, a cancel or Run's grace period does not
		// hold the message past one more lease.
		l.live = ctx
		rn.add(l)
		defer rn.remove(l)
	}
	herr := callHandler(ctx, m, h)
	var outcome Outcome
	var err error
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrCancelled) && m.finished.Load() == 0:
		// Queue.Cancel ended the delivery: nothing is left to finish.
		m.finished.CompareAndSwap(0, int32(OutcomeCancelled))
		outcome, err = OutcomeCancelled, ErrCancelled
	case errors.Is(cause, ErrHandlerTimeout) && ctx.Err() != nil:
		// Retried (or dead-lettered) as after a handler error, whatever
		// the handler returned once its time was over.
		if herr == nil || errors.Is(herr, context.DeadlineExceeded) || errors.Is(herr, context.Canceled) {
			herr = fmt.Errorf("%w after %v", ErrHandlerTimeout, c.cfg.HandlerTimeout)
		} else if !errors.Is(herr, ErrHandlerTimeout) {
			herr = fmt.Errorf("%w after %v: %w", ErrHandlerTimeout, c.cfg.HandlerTimeout, herr)
		}
		fallthrough
	default:
		outcome, err = c.finish(ctx, base, m, herr, ack)
	}
	for _, f := range m.afterFinish {
		c.afterFinish(m, f, outcome, err)
	}
}

// afterFinish calls one AfterFinish callback; a panic in it is reported, as
// a handler's is, and does not stop the others.
func (c *Consumer) afterFinish(m *Message, f func(Outcome, error), o Outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.report(fmt.Errorf("prioq: AfterFinish callback for %q in %q panicked: %v", m.ID, m.Queue(), r))
		}
	}()
	f(o, err)
}

// finish acks, retries or dead-letters m after its handler returned herr,
// unless the handler did so itself, and returns the outcome with its error
// (see AfterFinish).
func (c *Consumer) finish(ctx, base context.Context, m *Message, herr error, ack runAck) (Outcome, error) {
	if c.mode != AtLeastOnce {
		if herr != nil {
			c.report(fmt.Errorf("prioq: handler for %q in %q: %w", m.ID, m.Queue(), herr))
			return OutcomeFailed, herr
		}
		return OutcomeAcked, nil
	}
	// Unless the handler acked, retried or dead-lettered it itself, Run does;
	// err is that call's.
	var err error
	if m.finished.Load() == 0 {
		err = c.finishLeased(ctx, base, m, herr, ack)
	}
	switch done := Outcome(m.finished.Load()); done {
	case 0:
		return OutcomeUnfinished, err
	case OutcomeAcked:
		return done, err // nil, or ErrNotReplicated
	default:
		return done, herr
	}
}

// finishLeased acks m after its handler returned nil, or retries or
// dead-letters it after herr; what happened is recorded on m (finished).
func (c *Consumer) finishLeased(ctx, base context.Context, m *Message, herr error, ack runAck) error {
	// Finishing must outlive the handler's context (which may have ended at the
	// lease deadline): a short context of its own.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(base), c.qcfg.CallTimeout)
	defer cancel()
	var err error
	if herr == nil {
		var rode bool
		if rode, err = ack.ride(m); !rode {
			err = m.Ack(fctx) // merged with the acks of other handlers in flight
		}
	} else {
		skip := errors.Is(herr, ErrSkipRetry)
		level, msg := slog.LevelDebug, "prioq: handler failed, retrying"
		if skip || m.LastAttempt() {
			level, msg = slog.LevelWarn, "prioq: message dead-lettered"
		}
		c.qcfg.Logger.LogAttrs(ctx, level, msg, slog.String("queue", m.Queue()),
			slog.String("id", m.ID), slog.Int("attempt", m.Attempts), slog.Any("error", herr))
		if skip {
			err = m.fail(fctx, 0, herr.Error(), store.FailDead)
		} else {
			err = m.Retry(fctx, 0, herr.Error()) // at the last attempt fail.lua dead-letters it
		}
	}
	if err != nil {
		c.report(fmt.Errorf("prioq: finishing %q in %q: %w", m.ID, m.Queue(), err))
	}
	return err
}

func callHandler(ctx context.Context, m *Message, h Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("prioq: handler panic: %v", r)
		}
	}()
	return h(ctx, m)
}
