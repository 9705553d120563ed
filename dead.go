package prioq

import (
	"context"
	"fmt"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// DeadLetter describes one message in the dead-letter list.
type DeadLetter struct {
	MessageInfo

	// Reason is the last error: the handler's error, "lease expired", or why
	// the stored envelope did not decode.
	Reason string

	// DiedAt is when it was moved to the dead-letter list.
	DiedAt time.Time

	// Raw is the stored envelope, set only when it did not decode (then only
	// ID, read from Raw when possible, is set in MessageInfo), or the whole
	// damaged record of a message buried because it no longer said which
	// lane it came from (MessageInfo is then the message found inside it,
	// if any). Such a dead letter cannot be requeued (see RequeueDead).
	Raw []byte
}

// DeadLetters describes up to n dead-letter records (at most MaxBatch,
// however large n is) from offset start, oldest first. One round trip. A
// queue of several shards lists shard 0's dead letters, then shard 1's, and
// so on, and takes a round trip more (every shard's length, at once).
// Cancelling ctx abandons the read.
func (q *Queue) DeadLetters(ctx context.Context, start, n int) ([]DeadLetter, error) {
	if start < 0 || n < 1 {
		return nil, fmt.Errorf("%w: DeadLetters(%d, %d)", ErrInvalidOption, start, n)
	}
	n = min(n, MaxBatch)
	if len(q.shards) == 1 {
		return deadLettersOf(q.shards[0].DeadLetters(ctx, start, n))
	}
	lens := make([]int, len(q.shards))
	err := q.eachShard(func(i int, s *store.Shard) (err error) {
		lens[i], err = s.DeadLen(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	for i, s := range q.shards {
		if start >= lens[i] {
			start -= lens[i]
			continue
		}
		part, err := deadLettersOf(s.DeadLetters(ctx, start, n-len(out)))
		out = append(out, part...)
		if err != nil || len(out) >= n {
			return out, err
		}
		start = 0
	}
	return out, nil
}

// RequeueDead puts the dead message with this id back at the tail of its lane
// with 0 attempts, keeping its id. ErrNotFound when no dead message has it;
// ErrCorrupt when its dead letter was buried because its routing did not parse
// (it stays until PurgeDead; its payload can be enqueued again by hand), or
// when its lane key holds the wrong type (it stays until the key is mended).
// One round trip; O(dead-letter list) inside Redis. Cancelling ctx abandons
// the call; the message is then either requeued or not.
func (q *Queue) RequeueDead(ctx context.Context, id string) error {
	if err := store.ValidateID(id); err != nil {
		return err
	}
	var n int64
	var err error
	for _, s := range q.shardsFor(id) {
		if n, err = s.DeadOp(ctx, store.DeadRequeue, id); err != nil || n != 0 {
			break
		}
	}
	switch {
	case err != nil:
	case n == 0:
		err = fmt.Errorf("prioq: requeue %q in %q: %w", id, q.name, ErrNotFound)
	case n == -2:
		err = fmt.Errorf("prioq: requeue %q in %q: %w: its lane key holds the wrong type; mend the key, then requeue", id, q.name, ErrCorrupt)
	case n < 0:
		err = fmt.Errorf("prioq: requeue %q in %q: %w: its dead letter does not say which lane it came from (its Reason says why)", id, q.name, ErrCorrupt)
	}
	return err
}

// RequeueAllDead requeues every dead message and returns how many. One round
// trip. Cancelling ctx abandons the call; the requeue then happened whole or
// not at all.
func (q *Queue) RequeueAllDead(ctx context.Context) (int64, error) {
	return q.sumShards(func(s *store.Shard) (int64, error) { return s.DeadOp(ctx, store.DeadRequeue, "") })
}

// PurgeDead deletes every dead message, releasing their caller ids, and returns
// how many. One round trip. Cancelling ctx abandons the call; the purge then
// happened whole or not at all.
func (q *Queue) PurgeDead(ctx context.Context) (int64, error) {
	return q.sumShards(func(s *store.Shard) (int64, error) { return s.DeadOp(ctx, store.DeadPurge, "") })
}

// deadLettersOf is the DeadLetter of each record read.
func deadLettersOf(recs []store.DeadLetter, err error) ([]DeadLetter, error) {
	if recs == nil {
		return nil, err
	}
	out := make([]DeadLetter, len(recs))
	for i, r := range recs {
		out[i] = DeadLetter{MessageInfo: MessageInfo(r.Info), Reason: r.Reason, DiedAt: r.DiedAt, Raw: r.Raw}
	}
	return out, err
}
