package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// coalescer merges concurrent calls of one kind (single enqueues, single
// acks) into one Redis round trip, as a database merges concurrent commits.
// What a Redis server spends per message is mostly per round trip (reading a
// request, parsing it, writing a reply), not per command, so fifty acks in
// one pipeline cost it a fraction of fifty acks in fifty round trips.
//
// A caller that finds no call in flight makes its call at once, alone and
// with its own context: a lone caller waits for nothing. Callers that arrive
// while a call is in flight queue; when it ends, everything queued goes as
// one call (up to maxItems items and maxBytes bytes, at least one), made by a
// goroutine that lives until the queue is empty. Every caller has a deadline:
// its ctx's, else timeout (the queue's CallTimeout) from when it called, and
// returns by it, however many calls were queued ahead of it. A queued caller
// whose deadline comes before its call starts leaves the queue, and nothing
// of it is sent; once sent, it returns ctx.Err() and the call goes on, as any
// abandoned call (with keepSent it waits for the result instead: see drain
// for how long a merged call runs). Every caller gets only its own result: a
// combined call never reports one caller's outcome to another.
type coalescer[T, R any] struct {
	size     func(T) int // bytes an item adds to a call
	maxItems int
	maxBytes int
	timeout  time.Duration
	keepSent bool // see do

	mu      sync.Mutex
	busy    bool // a call is in flight
	pending []*coalesced[T, R]
}

type coalesced[T, R any] struct {
	item     T
	run      func(ctx context.Context, items []T) []R // the call: one result per item, in order
	fail     func(error) R                            // its result for an error: do's canceled
	deadline time.Time                                // the caller's
	res      R
	sent     bool
	done     chan struct{}
}

// do makes item's call with run (each caller of one coalescer passes the
// same), alone or merged with others, and returns its result.
// When ctx ends first it returns canceled(ctx.Err()); with keepSent, only
// while the item is unsent: once sent, it waits for the result (a take's
// leased messages must reach their asker), and a lone call runs without ctx's
// cancellation.
func (c *coalescer[T, R]) do(ctx context.Context, item T, run func(context.Context, []T) []R, canceled func(error) R) R {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	w := &coalesced[T, R]{item: item, run: run, fail: canceled, deadline: deadline, done: make(chan struct{})}
	c.mu.Lock()
	if !c.busy {
		c.busy = true
		c.mu.Unlock()
		callCtx := ctx
		if c.keepSent {
			callCtx = context.WithoutCancel(ctx)
		}
		defer func() { // also if run panics: the queued must not wait forever
			if batch := c.nextBatch(); batch != nil {
				Go(ctx, func() { c.drain(batch) })
			}
		}()
		c.send(callCtx, []*coalesced[T, R]{w})
		return w.res
	}
	c.pending = append(c.pending, w)
	c.mu.Unlock()
	select {
	case <-w.done:
		return w.res
	case <-ctx.Done():
	}
	c.mu.Lock()
	if !w.sent {
		i := slices.Index(c.pending, w)
		c.pending = slices.Delete(c.pending, i, i+1)
		c.mu.Unlock()
		return canceled(ctx.Err())
	}
	c.mu.Unlock()
	if c.keepSent {
		<-w.done
		return w.res
	}
	select {
	case <-w.done: // it ended as ctx did: the result is known
		return w.res
	default:
		return canceled(ctx.Err())
	}
}

// nextBatch takes what queued, in order, up to maxItems / maxBytes (at least
// one), or marks the coalescer idle and returns nil when nothing did. A caller
// whose deadline has passed is not sent: it leaves the queue itself.
func (c *coalescer[T, R]) nextBatch() []*coalesced[T, R] {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var batch []*coalesced[T, R]
	bytes, full := 0, false
	kept := c.pending[:0]
	for _, w := range c.pending {
		b := c.size(w.item)
		full = full || len(batch) == c.maxItems || len(batch) > 0 && bytes+b > c.maxBytes
		if full || !w.deadline.After(now) {
			kept = append(kept, w)
			continue
		}
		bytes += b
		w.sent = true
		batch = append(batch, w)
	}
	clear(c.pending[len(kept):]) // no finished entry stays reachable
	c.pending = kept
	if len(batch) == 0 {
		c.busy = false
		if len(kept) == 0 {
			c.pending = nil // a burst's backing array goes with it
		}
		return nil
	}
	return batch
}

// drain sends batch, then what queued meanwhile, until nothing did. A merged
// call runs until the latest deadline of its callers, so that none is cut
// short by another's, but no longer than timeout; with keepSent (takes: each
// sent caller waits for the result, whose leased messages must reach it) it
// gets a whole timeout.
func (c *coalescer[T, R]) drain(batch []*coalesced[T, R]) {
	for ; batch != nil; batch = c.nextBatch() {
		limit := time.Now().Add(c.timeout)
		deadline := limit
		if !c.keepSent {
			deadline = batch[0].deadline
			for _, w := range batch[1:] {
				if w.deadline.After(deadline) {
					deadline = w.deadline
				}
			}
			if deadline.After(limit) {
				deadline = limit
			}
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		c.send(ctx, batch)
		cancel()
	}
}

// send makes one call for batch and hands each waiter its result. A run that
// does not give one result per item is a bug, reported to each caller rather
// than leaving one waiting.
func (c *coalescer[T, R]) send(ctx context.Context, batch []*coalesced[T, R]) {
	items := make([]T, len(batch))
	for i, w := range batch {
		items[i] = w.item
	}
	res := batch[0].run(ctx, items)
	for i, w := range batch {
		if len(res) == len(batch) {
			w.res = res[i]
		} else {
			w.res = w.fail(fmt.Errorf("%w: %d results for %d calls", ErrScript, len(res), len(batch)))
		}
		close(w.done)
	}
}
