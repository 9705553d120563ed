package prioq

import (
	"context"
	"fmt"

	"github.com/prioq/prioq/internal/consume"
	"github.com/prioq/prioq/internal/store"
)

// AckAndReceive acks done and receives the next message: for a loop of single
// calls, the Ack and the Receive in one round trip where the consumer can, so
// that a message costs two (its enqueue, this call) where Receive + Ack cost
// three. The ack rides on the take (its two commands and the take's call in
// one pipeline, each with its own outcome: internal/store/ride.go); nothing
// about either changes but the round trip.
//
// The ack is made first and decides. When it does not succeed (ErrLeaseLost:
// the lease had ended and the message was taken back; ErrNotReplicated with
// Config.WaitReplicas: made, not confirmed; or the Redis error),
// AckAndReceive returns that error at once and no message; a message its take
// got meanwhile is given back (to the head of its lane, this delivery not
// counted), so nothing is lost or stranded. When the ack succeeds, the rest is
// Receive's: the next message, or Receive's error, the ack made all the same.
// Unsure which? done.Ack returns nil at once for a message acked already.
//
// Cancelling ctx returns ctx.Err(): the ack may or may not have been made
// (as for Ack; if not, the lease runs out and the message comes again); a
// done.Ack after it waits for the outcome of the ack in flight rather than
// sending another. A message taken for this call waits for the next Receive.
//
// The ack rides when the consumer's next step is a take of its own: a queue
// of one shard, AtLeastOnce, without Weights or WaitReplicas; nothing kept
// from an earlier fetch and no other fetch in progress; done a message of
// this queue whose ack is its two commands (not one with a caller id, a
// result, a progress, or Config.Retain: each of those is a script). Any other
// way it acks done alone (Ack) and then receives (Receive): the same outcomes,
// one round trip more.
//
// done must be an AtLeastOnce message (ErrWrongMode otherwise, nil:
// ErrInvalidOption); both refusals change nothing and take nothing. A done
// acked already (Ack, AckBatch, Run) is not acked again: this is Receive.
func (c *Consumer) AckAndReceive(ctx context.Context, done *Message) (*Message, error) {
	if done == nil {
		return nil, fmt.Errorf("%w: AckAndReceive(nil)", ErrInvalidOption)
	}
	if err := done.leased(); err != nil {
		return nil, err
	}
	if Outcome(done.finished.Load()) == OutcomeAcked {
		return c.Receive(ctx)
	}
	if !done.alone() {
		if m, err, carried := c.ackRiding(ctx, done); carried {
			return m, err
		}
	}
	if err := done.Ack(ctx); err != nil {
		return nil, err
	}
	return c.Receive(ctx)
}

// ackRiding is AckAndReceive with done's ack riding on the take of a fetch
// it starts; carried false: it could not (see Fetcher.ReceiveRiding), and
// nothing happened.
func (c *Consumer) ackRiding(ctx context.Context, done *Message) (m *Message, err error, carried bool) {
	// An ack that fails ends the wait for the take (which may wait for
	// work): the take goes on, and what it gets is kept for the next
	// Receive as after any Receive that gave up.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ro := &rideOutcome{done: make(chan struct{})}
	ride := consume.Ride{Req: done.d.Req(), Done: func(err error) {
		ro.err = err
		done.ackedIf(err)
		close(ro.done)
		if err != nil {
			stop()
		}
	}}
	done.riding.Store(ro)
	ds, carried, rerr := c.fetcher.ReceiveRiding(rctx, 1, done.d.Shard(), ride)
	if !carried {
		close(ro.done) // nothing rode: an Ack waiting on it goes on its own
		return nil, nil, false
	}
	select {
	case <-ro.done: // made with the take, or alone before a wait for work
	case <-ctx.Done():
		c.giveBack(ds)
		return nil, ctx.Err(), true
	}
	if ro.err != nil {
		c.giveBack(ds)
		return nil, ro.err, true
	}
	c.stats.delivered.Add(int64(len(ds)))
	if rerr != nil {
		return nil, rerr, true
	}
	return messagesOf(ds)[0], nil, true
}

// rideOutcome is the outcome of an ack riding on a take, for a done.Ack
// made while it is in flight (after a cancelled AckAndReceive): done is
// closed once err is set.
type rideOutcome struct {
	done chan struct{}
	err  error
}

// giveBack gives back messages taken for a caller who will not get them
// (AckAndReceive's ack failed, or its ctx ended as they came), in a round
// trip of its own: to the head of their lanes, the delivery not counted. A
// give-back that fails leaves them to their leases.
func (c *Consumer) giveBack(ds []*store.Delivery) {
	if len(ds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.qcfg.CallTimeout)
	defer cancel()
	if err := c.fetcher.GiveBack(ctx, ds); err != nil {
		c.report(err)
	}
}
