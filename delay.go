package prioq

import (
	"context"

	"fmt"
	"strconv"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// promote moves due delayed messages into their lanes, up to PromoteBatch, in
// one Lua call, and returns how many it moved and the next due time (-1: none).
func (q *Queue) promote(ctx context.Context) (int, int64, error) {
	return q.promoteAt(ctx, time.Now().UnixMilli())
}

// promoteAt promotes what is due at nowMs; tests drive it with virtual time.
func (q *Queue) promoteAt(ctx context.Context, nowMs int64) (int, int64, error) {
	var res []int64
	err := q.c.Do(ctx, promoteScript.Cmd(&res, q.k.promoteKeys, fmtInt(nowMs),
		strconv.Itoa(q.cfg.PromoteBatch), q.armFlag(), q.kind()))
	if err != nil {
		return 0, 0, fmt.Errorf("prioq: promote %q: %w", q.name, err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("prioq: promote %q: %w", q.name, ErrScript)
	}
	return int(res[0]), res[1], nil
}

// nextDue reads the due time at the head of the delayed set (-1: none).
func (q *Queue) nextDue(ctx context.Context) (int64, error) {
	var head []string
	if err := q.c.Do(ctx, radix.Cmd(&head, "ZRANGE", q.k.delayed, "0", "0", "WITHSCORES")); err != nil {
		return 0, fmt.Errorf("prioq: next due in %q: %w", q.name, err)
	}
	if len(head) < 2 {
		return -1, nil
	}
	f, err := strconv.ParseFloat(head[1], 64)
	if err != nil {
		return 0, fmt.Errorf("prioq: next due in %q: %w: score %q", q.name, ErrCorrupt, head[1])
	}
	return int64(f), nil
}

// runPromoter keeps delayed messages moving until ctx is done. It sleeps on a
// client-side timer until the next due time (a Redis blocking timeout is only
// precise to ~100 ms at the default hz 10) and is woken early by the sched
// marker, which an enqueue pushes when it schedules a message earlier than the
// current head. Several promoters (one per consumer) may run against one queue:
// promotion is atomic, so they never move a message twice.
//
// Idle cost: one BLPOP per waitTimeout plus one ZRANGE per waitTimeout.
func (c *Consumer) runPromoter(ctx context.Context) {
	q := c.q
	wake := make(chan bool, 1) // true: marker popped; false: wait timed out
	waiterDone := make(chan struct{})
	go func() {
		defer close(waiterDone)
		c.promoteWaiter(ctx, wake)
	}()
	defer func() { <-waiterDone }()

	timer := time.NewTimer(0) // promote once at start: due work may be waiting
	defer timer.Stop()
	for {
		var promoteNow bool
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			promoteNow = true
		case marker := <-wake:
			promoteNow = marker
		}
		next := int64(-1)
		var err error
		if promoteNow {
			for {
				var moved int
				moved, next, err = q.promote(ctx)
				if err != nil || moved < q.cfg.PromoteBatch {
					break
				}
			}
		} else {
			next, err = q.nextDue(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.report(err)
			resetTimer(timer, c.cfg.RetryInterval)
			continue
		}
		if next >= 0 {
			resetTimer(timer, time.Until(time.UnixMilli(next)))
		} else {
			timer.Stop()
		}
	}
}

// promoteWaiter blocks on the sched marker and reports wake-ups and timeouts.
func (c *Consumer) promoteWaiter(ctx context.Context, wake chan<- bool) {
	q := c.q
	timeout := strconv.FormatFloat(c.cfg.PromoteWait.Seconds(), 'f', -1, 64)
	for ctx.Err() == nil {
		var got []string
		err := q.c.Do(ctx, radix.Cmd(&got, "BLPOP", q.k.sched, timeout))
		if err != nil {
			if ctx.Err() != nil {
				// Cancelling closed the connection; a marker popped in that
				// instant would be lost, so put one back: at worst another
				// promoter wakes for nothing.
				rearm, cancel := context.WithTimeout(context.Background(), time.Second)
				p := radix.NewPipeline()
				p.Append(radix.Cmd(nil, "RPUSH", q.k.sched, "1"))
				p.Append(radix.Cmd(nil, "LTRIM", q.k.sched, "-1", "-1"))
				_ = q.c.Do(rearm, p)
				cancel()
				return
			}
			c.report(fmt.Errorf("prioq: promoter of %q: %w", q.name, err))
			if !sleepCtx(ctx, c.cfg.RetryInterval) {
				return
			}
			continue
		}
		select {
		case wake <- len(got) > 0:
		default:
		}
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	if d < 0 {
		d = 0
	}
	t.Reset(d)
}

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
