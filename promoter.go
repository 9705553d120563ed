package prioq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// promoter keeps a queue's delayed messages moving: it sleeps on a
// client-side timer until the next due time (a Redis blocking timeout is only
// precise to ~100 ms at the default hz 10), for as long as the server's reply
// says is left, so the host's wall clock plays no part, and is woken early by the sched
// marker, which an enqueue pushes when it schedules a message earlier than the
// current head. Several promoters (one per consumer) may run against one
// queue: promotion is atomic, so they never move a message twice.
//
// Every call has a deadline, so a call that hangs (a half-open connection, a
// pool replaced by a Sentinel failover) fails at its deadline and the loop
// goes on. Idle cost: one BLPOP and one ZRANGE per PromoteWait and, in
// AtMostOnce (which has no sweeper), a keepMeta every few of those.
type promoter struct {
	s         *shard
	cfg       *ConsumerConfig // its consumer's: PromoteWait, RetryInterval
	report    func(error)
	keepsMeta bool // the queue's meta key is its to keep (shard 0, AtMostOnce)

	// woken, for a queue of several shards, is how the consumer's one wait
	// on the shard (fanin.go waiter, which watches the shard's sched set
	// beside its wake-up set) says an earlier due time was scheduled; the
	// promoter then does not block itself, and re-reads the next due time
	// every PromoteWait.
	woken <-chan struct{}
}

func (p *promoter) run(ctx context.Context) {
	c, q := p, p.s
	wake := make(chan bool, 1) // true: marker popped; false: re-read the next due time
	waiterDone := make(chan struct{})
	go func() {
		defer close(waiterDone)
		if p.woken != nil {
			p.forward(ctx, wake)
		} else {
			p.wait(ctx, wake)
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
			if next, now, err = q.promoteDue(ctx); err != nil {
				// The server's clock is unknown until a promotion succeeds
				// again: the next wake-up of any kind retries it rather than
				// computing a sleep from a stale clock.
				learnedAt = time.Time{}
			} else {
				serverMs, learnedAt = now, time.Now()
			}
		} else {
			if p.keepsMeta && round%metaEvery == 0 && q.cfg.Mode == AtMostOnce { // AtLeastOnce: the sweeper does it
				q.keepMeta(ctx, c.report)
			}
			cctx, cancel := context.WithTimeout(ctx, q.cfg.CallTimeout)
			var due int64
			due, err = q.nextDue(cctx)
			cancel()
			if err == nil && due >= 0 {
				next = max(0, time.Duration(due-serverMs)*time.Millisecond-time.Since(learnedAt))
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.report(err)
			timer.Reset(c.cfg.RetryInterval)
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
// learn of it only at their PromoteWait. At worst one wakes for nothing.
// One round trip with a deadline of its own: Close waits for it.
func (p *promoter) rearm() {
	q := p.s
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := q.doPipeline(ctx, func() *radix.Pipeline {
		pl := radix.NewPipeline()
		if q.sharded() { // the sched key is a sorted set there
			pl.Append(radix.Cmd(nil, "ZADD", q.k.sched, "0", dueMember))
			return pl
		}
		pl.Append(radix.Cmd(nil, "RPUSH", q.k.sched, schedMarker))
		pl.Append(radix.Cmd(nil, "LTRIM", q.k.sched, "-1", "-1"))
		return pl
	})
	if err != nil {
		p.report(fmt.Errorf("prioq: promoter of %q: putting the wake-up marker back: %w", q.name, err))
	}
}

// forward turns the waiter's signals into wake-ups and sends a re-read of the
// next due time every PromoteWait (what wait's timeouts do).
func (p *promoter) forward(ctx context.Context, wake chan<- bool) {
	t := time.NewTicker(p.cfg.PromoteWait)
	defer t.Stop()
	for {
		marker := false
		select {
		case <-ctx.Done():
			return
		case <-p.woken:
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
func (p *promoter) wait(ctx context.Context, wake chan<- bool) {
	c, q := p, p.s
	timeout := strconv.FormatFloat(c.cfg.PromoteWait.Seconds(), 'f', -1, 64)
	for ctx.Err() == nil {
		var got []string // a fresh receiver per call: radix may write a late reply into it
		wctx, cancel := context.WithTimeout(ctx, c.cfg.PromoteWait+blockMargin)
		err := q.doBlocking(wctx, radix.Cmd(&got, "BLPOP", q.k.sched, timeout))
		cancel()
		marker := err == nil && len(got) > 0
		if err != nil && closedUnder(q.c, err) {
			marker = true // the marker may have gone with the pool: promote
		} else if err != nil {
			if ctx.Err() != nil {
				return // run puts a marker back
			}
			c.report(fmt.Errorf("prioq: promoter of %q: %w", q.name, err))
			if !sleepCtx(ctx, c.cfg.RetryInterval) {
				return
			}
		}
		select {
		case wake <- marker:
		default:
		}
	}
}

// promoteDue promotes until a call moves fewer than PromoteBatch, each call
// with its own CallTimeout, and returns the last call's time to the next due
// message (-1: none) and server now. The promoter's and a MultiConsumer's
// (multi.go).
func (s *shard) promoteDue(ctx context.Context) (next time.Duration, nowMs int64, err error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		moved, next, nowMs, err := s.promote(cctx)
		cancel()
		if err != nil || moved < s.cfg.PromoteBatch {
			return next, nowMs, err
		}
	}
}

// promote moves due delayed messages into their lanes, up to PromoteBatch, in
// one Lua call, by the Redis server's clock. It returns how many it moved,
// how long until the next due time (-1: nothing delayed) and the server's now
// (unix ms).
func (s *shard) promote(ctx context.Context) (int, time.Duration, int64, error) {
	return s.promoteAt(ctx, "")
}

// promoteAt promotes what is due at nowMs ("" = the server's now); tests
// drive it with virtual time.
func (s *shard) promoteAt(ctx context.Context, nowMs string) (int, time.Duration, int64, error) {
	var res []int64
	err := s.do(ctx, s.eval(promoteScript, &res, s.k.promoteKeys, nowMs,
		strconv.Itoa(s.cfg.PromoteBatch), s.armFlag(), s.kind()))
	if err != nil {
		return 0, 0, 0, fmt.Errorf("prioq: promote %q: %w", s.name, err)
	}
	if len(res) != 3 {
		return 0, 0, 0, fmt.Errorf("prioq: promote %q: %w", s.name, ErrScript)
	}
	next := time.Duration(-1)
	if res[1] >= 0 {
		next = time.Duration(res[1]) * time.Millisecond
	}
	return int(res[0]), next, res[2], nil
}

// nextDue reads the next time a promotion has work (unix ms, server clock;
// -1: none): the due time at the head of the delayed set, or the time the
// first group parked at its rate limit comes back (gdue), the earlier.
func (s *shard) nextDue(ctx context.Context) (int64, error) {
	var head, gdue []string
	if err := s.do(ctx, radix.Cmd(&head, "ZRANGE", s.k.delayed, "0", "0", "WITHSCORES")); err != nil {
		return 0, fmt.Errorf("prioq: next due in %q: %w", s.name, err)
	}
	// (A gdue of the wrong type holds no time: the sweep puts its groups
	// back. Once a PromoteWait, so a second round trip costs nothing.)
	if s.cfg.Mode == AtLeastOnce && s.do(ctx, radix.Cmd(&gdue, "ZRANGE", s.k.gdue, "0", "0", "WITHSCORES")) == nil &&
		len(gdue) == 2 && (len(head) < 2 || scoreLess(gdue[1], head[1])) {
		head = gdue
	}
	if len(head) < 2 {
		return -1, nil
	}
	f, err := strconv.ParseFloat(head[1], 64)
	if err != nil {
		return 0, fmt.Errorf("prioq: next due in %q: %w: score %q", s.name, ErrCorrupt, head[1])
	}
	return int64(f), nil
}

// scoreLess compares two sorted-set scores as Redis writes them.
func scoreLess(a, b string) bool {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && x < y
}
