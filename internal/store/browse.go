package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// Scheduled is a delayed message and when it is due.
type Scheduled struct {
	Info
	Due time.Time
}

// Leased is a message in flight: its lease's deadline and when it was taken.
type Leased struct {
	Info
	Deadline, TakenAt time.Time
}

// Browsed reports, beside a page of messages, those of the range read whose
// record was gone by the second read (promoted, acked, swept between the
// two: the page is shorter) or did not decode (Broken: their ids, when
// known).
type Browsed struct {
	Gone   int
	Broken []string
}

// Scheduled returns the delayed messages from start, n at most, soonest due
// first (ties: in the order they were scheduled). Two round trips, not
// atomic: a message promoted between them is left out (Browsed.Gone).
func (s *Shard) Scheduled(ctx context.Context, start, n int) ([]Scheduled, Browsed, error) {
	members, scores, err := s.zrangeScores(ctx, s.k.delayed, start, n)
	if err != nil {
		return nil, Browsed{}, fmt.Errorf("prioq: delayed messages of %q: %w", s.name, err)
	}
	ids := make([]string, len(members))
	for i, m := range members {
		if len(m) > seqLen {
			ids[i] = m[seqLen:]
		}
	}
	recs, err := s.hmgetBytes(ctx, s.k.dstore, ids)
	if err != nil {
		return nil, Browsed{}, fmt.Errorf("prioq: delayed messages of %q: %w", s.name, err)
	}
	var out []Scheduled
	var b Browsed
	for i, r := range recs {
		if r == nil {
			b.Gone++
			continue
		}
		e, ok := envelopeIn(r, true)
		if !ok {
			b.Broken = append(b.Broken, ids[i])
			continue
		}
		out = append(out, Scheduled{Info: InfoOf(e), Due: time.UnixMilli(scores[i])})
	}
	return out, b, nil
}

// LeasedPage returns the messages in flight from start, n at most, the
// soonest lease deadline first. Two round trips, not atomic: a message
// acked between them is left out (Browsed.Gone).
func (s *Shard) LeasedPage(ctx context.Context, start, n int) ([]Leased, Browsed, error) {
	tokens, deadlines, err := s.zrangeScores(ctx, s.k.leases, start, n)
	if err != nil {
		return nil, Browsed{}, fmt.Errorf("prioq: messages in flight of %q: %w", s.name, err)
	}
	recs, err := s.hmgetBytes(ctx, s.k.inflight, tokens)
	if err != nil {
		return nil, Browsed{}, fmt.Errorf("prioq: messages in flight of %q: %w", s.name, err)
	}
	var out []Leased
	var b Browsed
	for i, r := range recs {
		if r == nil {
			b.Gone++
			continue
		}
		e, ok := envelopeIn(r, false)
		if !ok {
			b.Broken = append(b.Broken, tokens[i])
			continue
		}
		l := Leased{Info: InfoOf(e), Deadline: time.UnixMilli(deadlines[i])}
		if us, err := strconv.ParseInt(tokens[i][:min(13, len(tokens[i]))], 16, 64); err == nil && len(tokens[i]) >= 13 {
			l.TakenAt = time.UnixMicro(us)
		}
		out = append(out, l)
	}
	return out, b, nil
}

// envelopeIn finds the envelope in a stored record, after "lane|score|":
// a delayed message's seq‖envelope (seqFirst), an in-flight record's lane
// entry (an envelope, or seq‖envelope in a Range queue of format 2 or 3).
func envelopeIn(r []byte, seqFirst bool) (Envelope, bool) {
	starts := unknownLaneStarts(r)[1:] // not 0: the record starts with its lane
	if seqFirst {
		slices.Reverse(starts)
	}
	for _, at := range starts {
		if e, err := DecodeEnvelope(r[at:]); err == nil {
			return e, true
		}
	}
	return Envelope{}, false
}

// zrangeScores reads members start..start+n-1 of the sorted set key with
// their scores (whole numbers: times in ms).
func (s *Shard) zrangeScores(ctx context.Context, key string, start, n int) ([]string, []int64, error) {
	end := start + n - 1
	if end < start {
		end = math.MaxInt
	}
	var flat []string
	if err := s.do(ctx, radix.Cmd(&flat, "ZRANGE", key, strconv.Itoa(start), strconv.Itoa(end), "WITHSCORES")); err != nil {
		return nil, nil, err
	}
	members := make([]string, 0, len(flat)/2)
	scores := make([]int64, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		f, _ := strconv.ParseFloat(flat[i+1], 64)
		members, scores = append(members, flat[i]), append(scores, int64(f))
	}
	return members, scores, nil
}

// hmgetBytes reads fields of the hash key, nil for a missing one.
func (s *Shard) hmgetBytes(ctx context.Context, key string, fields []string) ([][]byte, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	var out [][]byte
	if err := s.do(ctx, radix.Cmd(&out, "HMGET", append([]string{key}, fields...)...)); err != nil {
		return nil, err
	}
	return out, nil
}

// Lens returns how many messages are delayed and in flight. One round trip.
func (s *Shard) Lens(ctx context.Context) (delayed, inFlight int64, err error) {
	err = s.doPipeline(ctx, func() *radix.Pipeline {
		p := radix.NewPipeline()
		p.Append(radix.Cmd(&delayed, "ZCARD", s.k.delayed))
		p.Append(radix.Cmd(&inFlight, "ZCARD", s.k.leases))
		return p
	})
	return delayed, inFlight, err
}

// RunNow makes the delayed message id due at once and promotes what is due
// on the shard. It reports false when the shard holds no delayed message
// of that id (never scheduled here, promoted, cancelled). Two steps: the
// due time is moved by a ZADD XX, which never creates a member (a message
// promoted meanwhile is not brought back), then PromoteDue; if the second
// fails, the message is due and any promoter's next round moves it.
func (s *Shard) RunNow(ctx context.Context, id string) (bool, error) {
	var rec []byte
	if err := s.do(ctx, radix.Cmd(&rec, "HGET", s.k.dstore, id)); err != nil {
		return false, fmt.Errorf("prioq: run %q now: %w", id, err)
	}
	// "lane|score|" seq‖envelope: the member is seq‖id.
	starts := unknownLaneStarts(rec)
	if len(starts) < 3 {
		return false, nil // none, or a record too damaged to name its member
	}
	member := string(rec[starts[1]:starts[2]]) + id
	var changed int
	if err := s.do(ctx, radix.Cmd(&changed, "ZADD", s.k.delayed, "XX", "CH", "0", member)); err != nil {
		return false, fmt.Errorf("prioq: run %q now: %w", id, err)
	}
	if changed == 0 {
		var score *string
		if err := s.do(ctx, radix.Cmd(&score, "ZSCORE", s.k.delayed, member)); err != nil || score == nil {
			return false, err // promoted or cancelled meanwhile
		}
	}
	if _, _, err := s.PromoteDue(ctx); err != nil {
		return true, fmt.Errorf("prioq: run %q now: it is due, its promotion failed (a promoter's next round moves it): %w", id, err)
	}
	return true, nil
}
