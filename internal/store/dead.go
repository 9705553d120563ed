package store

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

// DeadLetter is one record of the dead-letter list: the root's DeadLetter,
// field for field but the embedded Info (its MessageInfo).
type DeadLetter struct {
	Info
	Reason string
	DiedAt time.Time
	Raw    []byte // the stored bytes, when they did not decode (see parseDead)
}

// DeadLetters reads up to n dead-letter records (n ≤ MaxBatch) from offset
// start, oldest first. One round trip.
func (s *Shard) DeadLetters(ctx context.Context, start, n int) ([]DeadLetter, error) {
	return s.deadLetters(ctx, start, n)
}

// DeadLen is the length of the dead-letter list. One round trip.
func (s *Shard) DeadLen(ctx context.Context) (int, error) {
	var n int
	if err := s.do(ctx, radix.Cmd(&n, "LLEN", s.k.dead)); err != nil {
		return 0, fmt.Errorf("prioq: dead letters of %q: %w", s.name, err)
	}
	return n, nil
}

// What DeadOp does: requeue dead letters, or purge them.
const (
	DeadRequeue = deadRequeue
	DeadPurge   = deadPurge
)

// DeadOp runs dead.lua's op (DeadRequeue, DeadPurge) on the dead letter of
// id, or on all of them for "", and returns its count: how many, or for a
// requeue of one id, 0 (none has it), -1 (its record does not say its lane)
// or -2 (its lane key holds the wrong type). One round trip.
func (s *Shard) DeadOp(ctx context.Context, op, id string) (int64, error) {
	return s.deadOp(ctx, op, id)
}

// deadLetters is DeadLetters of one shard (n ≤ MaxBatch).
func (s *Shard) deadLetters(ctx context.Context, start, n int) ([]DeadLetter, error) {
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
			if e, err := DecodeEnvelope(raw[off:]); err == nil {
				d.Info = InfoOf(e)
				return d, nil
			}
			if d.ID == "" {
				d.ID = envelopeID(raw[off:])
			}
		}
		return d, nil
	}
	e, err := DecodeEnvelope(raw)
	if err != nil {
		d.ID = envelopeID(raw)
		d.Raw = raw
		return d, nil
	}
	d.Info = InfoOf(e)
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

func (s *Shard) deadOp(ctx context.Context, op, id string) (int64, error) {
	var n int64
	if err := s.do(ctx, s.eval(deadScript, &n, s.k.deadKeys, op, id, s.kind(), s.armFlag())); err != nil {
		return 0, fmt.Errorf("prioq: %s dead letters of %q: %w", op, s.name, err)
	}
	return n, nil
}
