package prioq

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
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
		return q.shards[0].deadLetters(ctx, start, n)
	}
	lens := make([]int, len(q.shards))
	err := q.eachShard(func(i int, s *shard) error {
		if err := s.do(ctx, radix.Cmd(&lens[i], "LLEN", s.k.dead)); err != nil {
			return fmt.Errorf("prioq: dead letters of %q: %w", q.name, err)
		}
		return nil
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
		part, err := s.deadLetters(ctx, start, n-len(out))
		out = append(out, part...)
		if err != nil || len(out) >= n {
			return out, err
		}
		start = 0
	}
	return out, nil
}

// deadLetters is DeadLetters of one shard (n ≤ MaxBatch).
func (s *shard) deadLetters(ctx context.Context, start, n int) ([]DeadLetter, error) {
	end := start + n - 1
	if end < start { // start is near math.MaxInt: no list is that long
		end = math.MaxInt
	}
	var recs [][]byte
	if err := s.do(ctx, radix.Cmd(&recs, "LRANGE", s.k.dead, strconv.Itoa(start), strconv.Itoa(end))); err != nil {
		return nil, fmt.Errorf("prioq: dead letters of %q: %w", s.name, err)
	}
	out := make([]DeadLetter, 0, len(recs))
	for _, r := range recs {
		d, err := parseDead(r)
		if err != nil {
			return out, fmt.Errorf("prioq: dead letters of %q: %w", s.name, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// parseDead reads "lane|score|diedMs|reasonLen|reason" followed by the envelope.
func parseDead(r []byte) (DeadLetter, error) {
	s := string(r)
	parts := strings.SplitN(s, "|", 5)
	if len(parts) != 5 {
		return DeadLetter{}, fmt.Errorf("%w: dead-letter record", ErrCorrupt)
	}
	died, err1 := strconv.ParseInt(parts[2], 10, 64)
	rlen, err2 := strconv.Atoi(parts[3])
	if err1 != nil || err2 != nil || rlen < 0 || rlen > len(parts[4]) {
		return DeadLetter{}, fmt.Errorf("%w: dead-letter record header", ErrCorrupt)
	}
	d := DeadLetter{Reason: parts[4][:rlen], DiedAt: time.UnixMilli(died)}
	raw := []byte(parts[4][rlen:])
	if parts[0] == unknownLane {
		// The whole damaged record was kept (see dead.lua body_env): show
		// its bytes, and the message inside them where one decodes.
		d.Raw = raw
		for _, off := range unknownLaneStarts(raw) {
			if e, err := decodeEnvelope(raw[off:]); err == nil {
				d.MessageInfo = newInfo(e)
				return d, nil
			}
			if d.ID == "" {
				d.ID = envelopeID(raw[off:])
			}
		}
		return d, nil
	}
	e, err := decodeEnvelope(raw)
	if err != nil {
		d.ID = envelopeID(raw)
		d.Raw = raw
		return d, nil
	}
	d.MessageInfo = newInfo(e)
	return d, nil
}

// unknownLaneStarts are the offsets where the envelope may start in the body
// of a dead letter of unknown lane: 0, after "lane|score|", and after that and
// a sequence number (dead.lua body_env tries the same).
func unknownLaneStarts(body []byte) []int {
	starts := []int{0}
	if i := bytes.IndexByte(body, '|'); i >= 0 {
		if j := bytes.IndexByte(body[i+1:], '|'); j >= 0 {
			p := i + 1 + j + 1
			starts = append(starts, p)
			if p+seqLen <= len(body) {
				starts = append(starts, p+seqLen)
			}
		}
	}
	return starts
}

func (s *shard) deadOp(ctx context.Context, op, id string) (int64, error) {
	var n int64
	if err := s.do(ctx, s.eval(deadScript, &n, s.k.deadKeys, op, id, s.kind(), s.armFlag())); err != nil {
		return 0, fmt.Errorf("prioq: %s dead letters of %q: %w", op, s.name, err)
	}
	return n, nil
}

// RequeueDead puts the dead message with this id back at the tail of its lane
// with 0 attempts, keeping its id. ErrNotFound when no dead message has it;
// ErrCorrupt when its dead letter was buried because its routing did not parse
// (it stays until PurgeDead; its payload can be enqueued again by hand), or
// when its lane key holds the wrong type (it stays until the key is mended).
// One round trip; O(dead-letter list) inside Redis. Cancelling ctx abandons
// the call; the message is then either requeued or not.
func (q *Queue) RequeueDead(ctx context.Context, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	var n int64
	var err error
	for _, s := range q.shardsFor(id) {
		if n, err = s.deadOp(ctx, deadRequeue, id); err != nil || n != 0 {
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
	return q.sumShards(func(s *shard) (int64, error) { return s.deadOp(ctx, deadRequeue, "") })
}

// PurgeDead deletes every dead message, releasing their caller ids, and returns
// how many. One round trip. Cancelling ctx abandons the call; the purge then
// happened whole or not at all.
func (q *Queue) PurgeDead(ctx context.Context) (int64, error) {
	return q.sumShards(func(s *shard) (int64, error) { return s.deadOp(ctx, deadPurge, "") })
}
