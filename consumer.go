package prioq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// ConsumerConfig configures a Consumer. The zero value of every field selects its default.
type ConsumerConfig struct {
	// Concurrency is how many handlers Run runs at once. Defaults to 1.
	Concurrency int
	// Lease is how long a taken message stays invisible to other consumers
	// before it is delivered again (AtLeastOnce). Defaults to 30s.
	Lease time.Duration
	// BlockTimeout is the server-side timeout of one blocking wait: an idle
	// consumer sends one command per BlockTimeout. Close of an AtMostOnce
	// consumer may wait this long for a pop in progress (an AtLeastOnce wait is
	// interrupted at once). Defaults to 2s for AtMostOnce, 5s for AtLeastOnce.
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
	// wake-up; after it the promoter re-reads the next due time. Defaults to 10s.
	PromoteWait time.Duration
	// SweepInterval is how often this consumer looks for expired leases
	// (AtLeastOnce). Defaults to 10s, or Lease/2 when that is shorter.
	SweepInterval time.Duration
	// GracePeriod is how long Run waits, after its ctx is done, for handlers in
	// flight to finish before it cancels their contexts. Defaults to 30s.
	GracePeriod time.Duration
	// RetryInterval is how long background loops wait after a Redis error.
	// Defaults to 500ms.
	RetryInterval time.Duration
	// OnError receives errors of background work (promotion, sweeps, acks in
	// Run, handler errors of AtMostOnce messages). Defaults to dropping them.
	OnError func(error)
}

func (c ConsumerConfig) withDefaults(mode Mode) ConsumerConfig {
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.BlockTimeout <= 0 {
		c.BlockTimeout = 2 * time.Second
		if mode == AtLeastOnce {
			c.BlockTimeout = 5 * time.Second
		}
	}
	if c.PromoteWait <= 0 {
		c.PromoteWait = 10 * time.Second
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 10 * time.Second
		if c.Lease/2 < c.SweepInterval {
			c.SweepInterval = c.Lease / 2
		}
	}
	if c.GracePeriod <= 0 {
		c.GracePeriod = 30 * time.Second
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = 500 * time.Millisecond
	}
	return c
}

// Consumer takes messages from one queue. Receive, ReceiveBatch and Run may be
// called from several goroutines; they share one fetch in progress at a time,
// so a consumer holds at most two blocking connections of the client's pool at
// once (its fetch and its promoter's wait). Size a radix pool for 2 per
// consumer plus what the rest of the program uses.
//
// A consumer starts background work (promotion of delayed messages and, for
// AtLeastOnce, the lease sweep) when it is created: Close it.
type Consumer struct {
	q            *Queue
	cfg          ConsumerConfig
	blockTimeout string // cfg.BlockTimeout in seconds, as Redis takes it

	bg     context.Context // ends on Close: background work and AtLeastOnce waits
	stop   context.CancelFunc
	bgDone sync.WaitGroup

	mu       sync.Mutex
	held     []*Message    // fetched but not handed out yet
	fetching chan struct{} // closed when the fetch in progress ends; nil if none
	fetchErr error
	waiting  int // callers waiting on the fetch in progress
	closed   bool
}

// NewConsumer returns a consumer of q and starts its background work.
func (q *Queue) NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
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
	c.bg, c.stop = context.WithCancel(context.Background())
	if !cfg.NoPromoter {
		c.goBackground(c.runPromoter)
	}
	if q.cfg.Mode == AtLeastOnce {
		c.goBackground(c.runSweeper)
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
	if c.cfg.OnError != nil && err != nil {
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

// ReceiveBatch is Receive for up to n messages (at least one), all from the
// highest non-empty lane, in one round trip. Cancellation as for Receive.
func (c *Consumer) ReceiveBatch(ctx context.Context, n int) ([]*Message, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: ReceiveBatch(%d)", ErrInvalidOption, n)
	}
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if len(c.held) > 0 {
			k := min(n, len(c.held))
			out := append([]*Message(nil), c.held[:k]...)
			c.held = c.held[k:]
			c.mu.Unlock()
			return out, nil
		}
		if c.fetching == nil {
			if err := c.fetchErr; err != nil {
				c.fetchErr = nil
				c.mu.Unlock()
				return nil, err
			}
			if err := ctx.Err(); err != nil {
				c.mu.Unlock()
				return nil, err
			}
			c.fetching = make(chan struct{})
			go c.fetch(c.fetching, n)
		}
		done := c.fetching
		c.waiting++
		c.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// stillWanted reports whether anyone waits for the fetch in progress.
func (c *Consumer) stillWanted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting > 0 && !c.closed
}

// fetch runs one fetch and parks its result in c.held / c.fetchErr. It does not
// use the caller's context: abandoning a blocking pop would close its
// connection, and a message popped in that instant would be lost. Each fetch
// ends by itself within BlockTimeout (plus a margin when Redis is unreachable).
func (c *Consumer) fetch(done chan struct{}, n int) {
	var msgs []*Message
	var err error
	if c.q.cfg.Mode == AtLeastOnce {
		msgs, err = c.fetchLeased(n)
	} else {
		msgs, err = c.fetchPopped(n)
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.held = append(c.held, msgs...)
	}
	if err != nil && c.bg.Err() == nil {
		c.fetchErr = err
	}
	c.fetching = nil
	close(done)
	c.mu.Unlock()
	if closed && len(msgs) > 0 {
		// Close stopped waiting for this fetch (its ctx ended first) and has
		// already given back what was held: give these back too.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := c.putBack(ctx, msgs); err != nil {
			c.report(err)
		}
		cancel()
	}
}

// laneOrder returns the lane keys in the order to serve them this fetch:
// the queue's fixed highest-first list, or a weighted draw.
func (c *Consumer) laneOrder() []string {
	if c.cfg.Weights == nil {
		return c.q.k.highFirst
	}
	n := len(c.q.k.lanes)
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
				order = append(order, c.q.k.lanes[i])
				total -= w[i]
				w[i] = 0
				break
			}
			r -= w[i]
		}
	}
	for i := n - 1; i >= 0; i-- {
		if c.cfg.Weights[i] == 0 {
			order = append(order, c.q.k.lanes[i])
		}
	}
	return order
}

// blockingCmd issues commands radix v4.1.4 does not know to be blocking
// (BLMPOP, BZMPOP) on a connection of their own: shared, they would stall
// every command queued behind them on that connection.
var blockingCmd = radix.CmdConfig{ActionProperties: func(cmd string, args ...string) radix.ActionProperties {
	p := radix.DefaultActionProperties(cmd, args...)
	p.CanShareConn, p.CanPipeline = false, false
	return p
}}

// fetchPopped is the AtMostOnce fetch: one multi-key blocking pop over the
// lanes in serving order. Redis serves the first non-empty key, which is what
// makes the order strict, and hands each element to exactly one waiting client.
func (c *Consumer) fetchPopped(n int) ([]*Message, error) {
	q := c.q
	keys, timeout := c.laneOrder(), c.blockTimeout
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.BlockTimeout+5*time.Second)
	defer cancel()

	var entries [][]byte
	var key string
	var err error
	switch {
	case n == 1 && !q.isRange(): // BLPOP: Redis ≥ 2.0
		var r [][]byte
		err = q.c.Do(ctx, radix.Cmd(&r, "BLPOP", append(keys, timeout)...))
		if len(r) == 2 {
			key, entries = string(r[0]), r[1:]
		}
	case n == 1: // BZPOPMIN: Redis ≥ 5.0
		var r [][]byte
		err = q.c.Do(ctx, radix.Cmd(&r, "BZPOPMIN", append(keys, timeout)...))
		if len(r) == 3 {
			key, entries = string(r[0]), r[1:2]
		}
	default: // BLMPOP / BZMPOP: Redis ≥ 7.0
		args := append([]string{timeout, strconv.Itoa(len(keys))}, keys...)
		var mb radix.Maybe
		if q.isRange() {
			var pairs [][][]byte // [member, score] pairs
			mb.Rcv = radix.Tuple{&key, &pairs}
			err = q.c.Do(ctx, blockingCmd.Cmd(&mb, "BZMPOP", append(args, "MIN", "COUNT", strconv.Itoa(n))...))
			for _, p := range pairs {
				if len(p) > 0 {
					entries = append(entries, p[0])
				}
			}
		} else {
			mb.Rcv = radix.Tuple{&key, &entries}
			err = q.c.Do(ctx, blockingCmd.Cmd(&mb, "BLMPOP", append(args, "LEFT", "COUNT", strconv.Itoa(n))...))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("prioq: receive from %q: %w", q.name, err)
	}
	lane, ok := q.k.laneIndex[key]
	if !ok && len(entries) > 0 {
		return nil, fmt.Errorf("prioq: receive from %q: %w: popped from unknown key %q", q.name, ErrScript, key)
	}
	msgs := make([]*Message, 0, len(entries))
	var ids []string
	for _, b := range entries {
		e, err := q.decodeLaneEntry(b)
		if err != nil {
			// Nowhere to report it but OnError: at-most-once has no dead letters.
			c.report(fmt.Errorf("prioq: receive from %q: dropped entry of lane %d: %w", q.name, lane, err))
			continue
		}
		m := newMessage(e)
		m.Attempts = 0
		m.q, m.raw, m.lane = q, b, lane
		msgs = append(msgs, m)
		if e.CallerID {
			ids = append(ids, e.ID)
		}
	}
	if len(ids) > 0 {
		// The message is gone from Redis: release its caller id. Not atomic
		// with the pop; if this process dies in between, the id stays taken
		// until Purge (see the README).
		if err := q.c.Do(ctx, radix.Cmd(nil, "SREM", append([]string{q.k.ids}, ids...)...)); err != nil {
			c.report(fmt.Errorf("prioq: receive from %q: releasing ids: %w", q.name, err))
		}
	}
	return msgs, nil
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
func (c *Consumer) fetchLeased(n int) ([]*Message, error) {
	q := c.q
	take := func() ([]*Message, error) {
		// Not derived from c.bg: a take abandoned by Close would lease a
		// message nobody holds until its lease ran out. It ends by itself.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		msgs, _, err := q.take(ctx, c.laneOrder(), n, c.cfg.Lease)
		return msgs, err
	}
	msgs, err := take()
	if err != nil || len(msgs) > 0 {
		return msgs, err
	}
	for {
		ctx, cancel := context.WithTimeout(c.bg, c.cfg.BlockTimeout+5*time.Second)
		var got []string
		err := q.c.Do(ctx, radix.Cmd(&got, "BZPOPMIN", q.k.wake, c.blockTimeout))
		cancel()
		if err != nil {
			if c.bg.Err() != nil {
				rearm, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = q.c.Do(rearm, radix.Cmd(nil, "ZADD", q.k.wake, "0", "w"))
				cancel()
				return nil, ErrClosed
			}
			return nil, fmt.Errorf("prioq: wait on %q: %w", q.name, err)
		}
		if len(got) > 0 {
			return take()
		}
		if !c.stillWanted() {
			return nil, nil
		}
	}
}

// runSweeper redelivers expired leases every SweepInterval.
func (c *Consumer) runSweeper(ctx context.Context) {
	for sleepCtx(ctx, jitter(c.cfg.SweepInterval)) {
		for {
			_, _, more, err := c.q.sweep(ctx, 256)
			if err != nil {
				if ctx.Err() == nil {
					c.report(err)
				}
				break
			}
			if !more {
				break
			}
		}
	}
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
// ends at once) or until ctx is done, and gives back messages fetched but
// never handed out: AtMostOnce ones to the head of their lane, AtLeastOnce
// ones by ending their lease, without counting the attempt. When ctx ends
// first, Close returns ctx's error and the pop still running gives back what
// it takes when it ends (within BlockTimeout). Messages already handed out are
// the caller's to Ack.
func (c *Consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	done := c.fetching
	c.mu.Unlock()
	if c.q.cfg.Mode == AtLeastOnce {
		c.stop() // interrupts the wake-up wait
	}
	var err error
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("prioq: close consumer of %q: fetch still running: %w", c.q.name, ctx.Err())
		}
	}
	c.stop()
	c.bgDone.Wait()
	c.mu.Lock()
	held := c.held
	c.held = nil
	c.mu.Unlock()
	if perr := c.putBack(ctx, held); perr != nil && err == nil {
		err = perr
	}
	return err
}

func (c *Consumer) putBack(ctx context.Context, held []*Message) error {
	if len(held) == 0 {
		return nil
	}
	q := c.q
	if q.cfg.Mode == AtLeastOnce {
		for _, m := range held {
			if err := q.fail(ctx, m, 0, "", true); err != nil {
				return fmt.Errorf("prioq: close consumer of %q: %w", q.name, err)
			}
		}
		return nil
	}
	p := radix.NewPipeline()
	for i := len(held) - 1; i >= 0; i-- { // LPUSH in reverse keeps their order
		m := held[i]
		if q.isRange() {
			p.Append(radix.Cmd(nil, "ZADD", q.k.lanes[m.lane], scoreOf(m.Priority), string(m.raw)))
		} else {
			p.Append(radix.Cmd(nil, "LPUSH", q.k.lanes[m.lane], string(m.raw)))
		}
		if m.callerID { // released when it was popped; it is alive again
			p.Append(radix.Cmd(nil, "SADD", q.k.ids, m.ID))
		}
	}
	if err := q.c.Do(ctx, p); err != nil {
		return fmt.Errorf("prioq: close consumer of %q: putting back %d messages: %w", q.name, len(held), err)
	}
	return nil
}
