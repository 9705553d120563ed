package prioq

import (
	"context"
	"errors"
	"fmt"

	"github.com/prioq/prioq/internal/consume"
)

// AckAndReceive acks done and receives the next message: for a loop of single
// calls, the Ack and the Receive in one round trip where the consumer can, so
// that a message costs two (its enqueue, this call) where Receive + Ack cost
// three. The ack rides on the take (its two commands and the take's call in
// one pipeline, each with its own outcome: internal/store/ride.go); nothing
// about either changes but the round trip.
//
// The ack is made first and decides. When it fails (ErrLeaseLost: the lease
// had ended and the message was taken back; or the Redis error),
// AckAndReceive returns that error and no message; whatever the take got
// meanwhile stays with this consumer for its next Receive (as after a
// Receive whose ctx ended: see Receive), so nothing is lost or stranded.
// When the ack succeeds, the rest is Receive's: the next message, or
// Receive's error, the ack made all the same. Unsure which? done.Ack
// returns nil at once for a message acked already.
//
// Cancelling ctx returns ctx.Err(): the ack may or may not have been made
// (as for Ack; if not, the lease runs out and the message comes again), and
// a message taken for this call waits for the next Receive.
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
		ch := make(chan error, 1)
		ride := consume.Ride{Req: done.d.Req(), Done: func(err error) { ch <- err }}
		ds, carried, rerr := c.fetcher.ReceiveRiding(ctx, 1, done.d.Shard(), ride)
		if carried {
			acked := func(err error) bool {
				ok := err == nil || errors.Is(err, ErrNotReplicated)
				if ok {
					done.finished.CompareAndSwap(0, int32(OutcomeAcked))
				}
				return ok
			}
			var ackErr error
			select {
			case ackErr = <-ch: // made with the take, or alone before a wait for work
			case <-ctx.Done():
				c.fetcher.Unreceive(ds)
				select {
				case ackErr = <-ch:
					acked(ackErr)
				default:
					// Made by the fetch within its call's deadline: recorded
					// then, so that done.Ack says nil at once.
					go func() { acked(<-ch) }()
				}
				return nil, ctx.Err()
			}
			if !acked(ackErr) {
				c.fetcher.Unreceive(ds) // the next Receive's
				return nil, ackErr
			}
			c.stats.delivered.Add(int64(len(ds)))
			if rerr != nil {
				return nil, rerr
			}
			return messagesOf(ds)[0], nil
		}
	}
	if err := done.Ack(ctx); err != nil && !errors.Is(err, ErrNotReplicated) {
		return nil, err
	}
	return c.Receive(ctx)
}
