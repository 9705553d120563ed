package prioq

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// ConsumerConfig configures a Consumer. The zero value of every field selects
// its default; a duration above 0 and below MinDuration is refused.
type ConsumerConfig struct {
	// Concurrency is how many handlers Run runs at once. Defaults to
	// DefaultConcurrency.
	Concurrency int

	// Lease is how long a taken message stays invisible to other consumers
	// before it is delivered again (AtLeastOnce). Defaults to DefaultLease.
	Lease time.Duration

	// BlockTimeout is the server-side timeout of one blocking wait: an idle
	// consumer sends one command per BlockTimeout. Close of an AtMostOnce
	// consumer may wait this long for a pop in progress (an AtLeastOnce wait is
	// interrupted at once). Defaults to DefaultBlockTimeout, or
	// DefaultBlockTimeoutAtMostOnce for an AtMostOnce queue.
	BlockTimeout time.Duration

	// Weights, when set, replaces strict priority order by a weighted one: for
	// each fetch the lane order is drawn at random, lane i coming first with
	// probability proportional to Weights[i], so no lane with a weight above 0
	// starves. One weight per lane, lane 0 first; lanes with weight 0 come last,
	// highest first.
	Weights []int

	// NoPromoter turns off this consumer's promoter of delayed messages. At
	// least one process must promote for delayed messages to become ready.
	NoPromoter bool

	// PromoteWait is the server-side timeout of the promoter's wait for a
	// wake-up; after it the promoter re-reads the next due time (a safety
	// net: enqueues wake it when they schedule an earlier message). Defaults
	// to DefaultPromoteWait.
	PromoteWait time.Duration

	// SweepInterval is how often this consumer looks for expired leases
	// (AtLeastOnce). Defaults to DefaultSweepInterval, or Lease/2 when that
	// is shorter (but at least MinDuration).
	SweepInterval time.Duration

	// GracePeriod is how long Run waits, after its ctx is done, for handlers in
	// flight to finish before it cancels their contexts. Defaults to
	// DefaultGracePeriod.
	GracePeriod time.Duration

	// RetryInterval is how long background loops wait after a Redis error.
	// Defaults to DefaultRetryInterval.
	RetryInterval time.Duration

	// Middleware wraps the handler of every Run call, the first one
	// outermost: tracing, metrics, logging around each delivery. None by
	// default.
	Middleware []Middleware

	// OnSweep, when set, is called after each sweep that found expired
	// leases (AtLeastOnce), with how many it delivered again and how many it
	// moved to the dead letters: for metrics.
	OnSweep func(redelivered, deadLettered int)

	// OnError receives errors of background work (promotion, sweeps, acks in
	// Run, handler errors of AtMostOnce messages). Defaults to dropping them.
	OnError func(error)
}

// validate refuses durations between 0 and MinDuration (0 or less selects
// a field's default).
func (c ConsumerConfig) validate() error {
	return minDurations(map[string]time.Duration{"Lease": c.Lease, "BlockTimeout": c.BlockTimeout,
		"PromoteWait": c.PromoteWait, "SweepInterval": c.SweepInterval, "GracePeriod": c.GracePeriod,
		"RetryInterval": c.RetryInterval})
}

func (c ConsumerConfig) withDefaults(mode Mode) ConsumerConfig {
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.BlockTimeout <= 0 {
		c.BlockTimeout = DefaultBlockTimeoutAtMostOnce
		if mode == AtLeastOnce {
			c.BlockTimeout = DefaultBlockTimeout
		}
	}
	if c.PromoteWait <= 0 {
		c.PromoteWait = DefaultPromoteWait
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = max(min(DefaultSweepInterval, c.Lease/2), MinDuration)
	}
	if c.GracePeriod <= 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	return c
}

// blockMargin is how much longer than its server-side timeout prioq waits for
// a blocking call before it gives up on it (the connection is then closed, so
// the server stops waiting too).
const blockMargin = 2 * time.Second

// Consumer takes messages from one queue. Receive, ReceiveBatch and Run may be
// called from several goroutines; they share one fetch in progress at a time,
// so a consumer holds at most two blocking connections of the client's pool at
// once (its fetch and its promoter's wait). Size a radix pool for 2 per
// consumer plus what the rest of the program uses.
//
// A consumer runs these parts, each in a file of its name:
//   - the fetcher: one fetch at a time for Receive, ReceiveBatch and Run (a
//     take, or a blocking pop, and the wait for a wake-up in between); an
//     AtLeastOnce take is merged with the queue's other consumers' takes in
//     flight (without Weights, same Lease: see Queue);
//   - the promoter, unless NoPromoter: moves due delayed messages into their
//     lanes, sleeping until the next due time;
//   - the sweeper (AtLeastOnce): gives expired leases back to their lanes;
//
// Acks (Run's included) are merged queue-wide with the acks in flight at the
// same time, by the Queue.
//
// The promoter and the sweeper start with the consumer. Close stops them in
// this order: no fetch starts any more; the wake-up wait, the promoter and the
// sweeper are cancelled; the fetch in progress ends (an AtMostOnce pop runs to
// its end, so that nothing it pops is lost); messages fetched but not handed
// out are given back; the promoter and the sweeper return. Each step is
// bounded by Close's ctx. A take queued behind another consumer's and not sent
// yet is dropped at once; one sent is waited for, and what it took given back.
type Consumer struct {
	q            *Queue
	cfg          ConsumerConfig
	blockTimeout string // cfg.BlockTimeout in seconds, as Redis takes it

	bg     context.Context // ends on Close: background work and AtLeastOnce waits
	stop   context.CancelFunc
	bgDone sync.WaitGroup

	fetcher fetcher
}

// NewConsumer returns a consumer of q and starts its background work.
// Durations between 0 and MinDuration are refused with ErrInvalidOption.
func (q *Queue) NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(q.cfg.Mode)
	if cfg.Weights != nil {
		if len(cfg.Weights) != len(q.k.lanes) {
			return nil, fmt.Errorf("%w: %d weights for %d lanes", ErrInvalidOption, len(cfg.Weights), len(q.k.lanes))
		}
		for _, w := range cfg.Weights {
			if w < 0 {
				return nil, fmt.Errorf("%w: negative weight %d", ErrInvalidOption, w)
			}
		}
	}
	c := &Consumer{q: q, cfg: cfg, blockTimeout: strconv.FormatFloat(cfg.BlockTimeout.Seconds(), 'f', -1, 64)}
	c.fetcher.c = c
	c.bg, c.stop = context.WithCancel(context.Background())
	if !cfg.NoPromoter {
		p := &promoter{c: c}
		c.goBackground(p.run)
	}
	if q.cfg.Mode == AtLeastOnce {
		s := &sweeper{c: c}
		c.goBackground(s.run)
	}
	return c, nil
}

func (c *Consumer) goBackground(f func(context.Context)) {
	c.bgDone.Add(1)
	go func() {
		defer c.bgDone.Done()
		f(c.bg)
	}()
}

func (c *Consumer) report(err error) {
	if err == nil {
		return
	}
	c.q.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "prioq: background error",
		slog.String("queue", c.q.name), slog.Any("error", err))
	if c.cfg.OnError != nil {
		c.cfg.OnError(err)
	}
}

// Receive blocks until a message is ready or ctx is done and returns it. On
// ctx done it returns ctx.Err() and takes nothing for the caller: a message
// that a fetch in progress takes after that is kept by the consumer for the
// next Receive, or put back at the head of its lane by Close.
//
// AtMostOnce: the message left Redis when it was popped; if this process dies
// before handling it, it is lost. AtLeastOnce: the message is leased; Ack,
// Retry or Extend it before the lease ends.
func (c *Consumer) Receive(ctx context.Context) (*Message, error) {
	msgs, err := c.ReceiveBatch(ctx, 1)
	if err != nil {
		return nil, err
	}
	return msgs[0], nil
}

// ReceiveBatch is Receive for up to n messages (at least one, at most
// MaxBatch however large n is), in priority order, in one round trip.
// AtLeastOnce fills the batch from lane after lane (in the drawn order with
// Weights); an AtMostOnce batch comes from the highest non-empty lane only
// (one blocking pop). Cancelling ctx works as for Receive: it returns ctx.Err() and
// takes nothing for the caller.
func (c *Consumer) ReceiveBatch(ctx context.Context, n int) ([]*Message, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: ReceiveBatch(%d)", ErrInvalidOption, n)
	}
	return c.fetcher.receive(ctx, min(n, MaxBatch))
}

// jitter spreads d over [0.75d, 1.25d) so many consumers do not sweep in step.
func jitter(d time.Duration) time.Duration {
	if d < 4 {
		return d
	}
	return d*3/4 + rand.N(d/2)
}

// Close stops the consumer: it ends its background work, waits for a fetch in
// progress (an AtMostOnce pop may take up to BlockTimeout; an AtLeastOnce wait
// ends at once), and gives back messages fetched but never handed out, in one
// round trip: AtMostOnce ones to the head of their lane, AtLeastOnce ones by
// ending their lease, without counting the attempt. Messages already handed
// out are the caller's to Ack.
//
// Close returns when ctx ends at the latest, with an error saying which step
// did not finish. Nothing held is lost for that, whatever ctx it gets (even
// one already ended): the give-back runs with a deadline of its own
// (Config.CallTimeout) and goes on after Close returns; a fetch still running
// gives back what it takes when it ends (within BlockTimeout); background
// work still in a Redis call ends at that call's deadline.
func (c *Consumer) Close(ctx context.Context) error {
	running, first := c.fetcher.close()
	if !first {
		return nil
	}
	if c.q.cfg.Mode == AtLeastOnce {
		c.stop() // interrupts the wake-up wait
	}
	fail := func(step string) error {
		return fmt.Errorf("prioq: close consumer of %q: %s: %w", c.q.name, step, ctx.Err())
	}
	if running != nil {
		select {
		case <-running:
		case <-ctx.Done():
			c.stop()
			return fail("fetch still running")
		}
	}
	c.stop()
	var err error
	if held := c.fetcher.takeHeld(); len(held) > 0 {
		// A give-back of its own: Close's ctx may end, or have ended, and an
		// AtMostOnce message exists nowhere else.
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.q.cfg.CallTimeout)
		gave := make(chan error, 1)
		go func() {
			defer cancel()
			err := c.putBack(gctx, held)
			if err != nil && ctx.Err() != nil {
				c.report(err) // Close returned already: this is the only place to say it
			}
			gave <- err
		}()
		select {
		case err = <-gave:
		case <-ctx.Done():
			err = fail(fmt.Sprintf("giving back %d messages (it goes on)", len(held)))
		}
	}
	stopped := make(chan struct{})
	go func() { c.bgDone.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		if err == nil {
			err = fail("promoter or sweeper still in a Redis call")
		}
	}
	return err
}

// releaseIDs frees the caller ids of AtMostOnce messages as they are handed
// out: from then on the message exists only in this process, and its id may
// be enqueued again. (Held, not handed out, it keeps the id: Close gives it
// back.) It runs with ctx; if ctx ends first, the release (an idempotent
// SREM) goes on with a deadline of its own after the messages are returned.
// If that fails too, the id stays taken until Purge; the error goes to
// OnError.
func (c *Consumer) releaseIDs(ctx context.Context, msgs []*Message) {
	if c.q.cfg.Mode != AtMostOnce {
		return
	}
	var ids []string
	for _, m := range msgs {
		if m.callerID {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	q := c.q
	release := func(ctx context.Context) error {
		return q.do(ctx, radix.Cmd(nil, "SREM", append([]string{q.k.ids}, ids...)...))
	}
	if ctx.Err() == nil {
		if err := release(ctx); err == nil || ctx.Err() == nil {
			if err != nil {
				c.report(fmt.Errorf("prioq: receive from %q: releasing ids: %w", q.name, err))
			}
			return
		}
	}
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.cfg.CallTimeout)
		defer cancel()
		if err := release(rctx); err != nil {
			c.report(fmt.Errorf("prioq: receive from %q: releasing ids: %w", q.name, err))
		}
	}()
}

// putBack gives held messages back in one round trip: AtLeastOnce ones with
// release.lua (not a write that WAITs for replicas: it acknowledges nothing),
// AtMostOnce ones to the head of their lanes in one pipeline. An AtMostOnce
// message held keeps its caller id reserved until it is handed out (see
// fetcher.receive), so putting it back needs no id.
func (c *Consumer) putBack(ctx context.Context, held []*Message) error {
	if len(held) == 0 {
		return nil
	}
	q := c.q
	if q.cfg.Mode == AtLeastOnce {
		if _, err := q.release(ctx, held); err != nil {
			return fmt.Errorf("prioq: close consumer of %q: %w", q.name, err)
		}
		return nil
	}
	// Each command is judged alone: one into a lane key of the wrong type
	// fails, and its message, having nowhere else to go (AtMostOnce has no
	// dead letters), is lost: reported, and its caller id released.
	pushed := make([]int64, len(held)) // a command's reply; -1 until it arrives
	p := radix.NewPipeline()
	for i := len(held) - 1; i >= 0; i-- { // LPUSH in reverse keeps their order
		m := held[i]
		pushed[i] = -1
		if q.isRange() {
			p.Append(radix.Cmd(&pushed[i], "ZADD", q.k.lanes[m.lane], scoreOf(m.Priority), string(m.raw)))
		} else {
			p.Append(radix.Cmd(&pushed[i], "LPUSH", q.k.lanes[m.lane], string(m.raw)))
		}
	}
	err := q.do(ctx, p)
	if err != nil && !isReply(err) {
		return fmt.Errorf("prioq: close consumer of %q: putting back %d messages: %w", q.name, len(held), err)
	}
	var lost []*Message
	for i, m := range held {
		if pushed[i] < 0 {
			lost = append(lost, m)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	c.releaseIDs(ctx, lost)
	return fmt.Errorf("prioq: close consumer of %q: %d of %d messages lost, their lane refused them: %w", q.name, len(lost), len(held), err)
}
