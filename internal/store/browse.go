package store

import (
	"context"
	_ "embed"
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

// Leased is a message in flight: its lease's deadline, when it was taken,
// and the holder id of the process that took it (LeaseHolder).
type Leased struct {
	Info
	Deadline, TakenAt time.Time
	Holder            string
}

// Browsed reports, beside a page of messages, those of the range read whose
// record was gone by the second read (promoted, acked, swept between the
// two: the page is shorter) or did not decode (Broken: their ids, when
// known).
type Browsed struct {
	Gone   int
	Broken []string
}

// Index is a page of a state's sorted set (the delayed set, the leases):
// its members and their scores (times in ms), in order.
type Index struct {
	Members []string
	Scores  []int64
}

// ScheduledIndex reads positions start..start+n-1 of the delayed set,
// soonest due first. One round trip.
func (s *Shard) ScheduledIndex(ctx context.Context, start, n int) (Index, error) {
	m, sc, err := s.zrangeScores(ctx, s.k.delayed, start, n)
	if err != nil {
		return Index{}, fmt.Errorf("prioq: delayed messages of %q: %w", s.name, err)
	}
	return Index{m, sc}, nil
}

// ScheduledOf reads the records of the delayed messages ix names, in its
// order. One round trip; a message promoted since the index was read is
// left out (Browsed.Gone).
func (s *Shard) ScheduledOf(ctx context.Context, ix Index) ([]Scheduled, Browsed, error) {
	ids := make([]string, len(ix.Members))
	for i, m := range ix.Members {
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
		out = append(out, Scheduled{Info: InfoOf(e), Due: time.UnixMilli(ix.Scores[i])})
	}
	return out, b, nil
}

// Scheduled returns the delayed messages from start, n at most, soonest due
// first (ties: in the order they were scheduled). Two round trips, not
// atomic: a message promoted between them is left out (Browsed.Gone).
func (s *Shard) Scheduled(ctx context.Context, start, n int) ([]Scheduled, Browsed, error) {
	ix, err := s.ScheduledIndex(ctx, start, n)
	if err != nil {
		return nil, Browsed{}, err
	}
	return s.ScheduledOf(ctx, ix)
}

// LeasedIndex reads positions start..start+n-1 of the leases, the soonest
// deadline first. One round trip.
func (s *Shard) LeasedIndex(ctx context.Context, start, n int) (Index, error) {
	m, sc, err := s.zrangeScores(ctx, s.k.leases, start, n)
	if err != nil {
		return Index{}, fmt.Errorf("prioq: messages in flight of %q: %w", s.name, err)
	}
	return Index{m, sc}, nil
}

// LeasedOf reads the records of the deliveries ix names (lease tokens), in
// its order. One round trip; one acked since is left out (Browsed.Gone).
func (s *Shard) LeasedOf(ctx context.Context, ix Index) ([]Leased, Browsed, error) {
	recs, err := s.hmgetBytes(ctx, s.k.inflight, ix.Members)
	if err != nil {
		return nil, Browsed{}, fmt.Errorf("prioq: messages in flight of %q: %w", s.name, err)
	}
	var out []Leased
	var b Browsed
	for i, r := range recs {
		tok := ix.Members[i]
		if r == nil {
			b.Gone++
			continue
		}
		e, ok := envelopeIn(r, false)
		if !ok {
			b.Broken = append(b.Broken, tok)
			continue
		}
		out = append(out, Leased{Info: InfoOf(e), Deadline: time.UnixMilli(ix.Scores[i]), TakenAt: TokenTime(tok), Holder: LeaseHolder(tok)})
	}
	return out, b, nil
}

// LeasedPage returns the messages in flight from start, n at most, the
// soonest lease deadline first. Two round trips, not atomic: a message
// acked between them is left out (Browsed.Gone).
func (s *Shard) LeasedPage(ctx context.Context, start, n int) ([]Leased, Browsed, error) {
	ix, err := s.LeasedIndex(ctx, start, n)
	if err != nil {
		return nil, Browsed{}, err
	}
	return s.LeasedOf(ctx, ix)
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

// RunNow makes the delayed message id due now and promotes what is due on
// the shard. It reports false when the shard holds no delayed message of
// that id (never scheduled here, promoted, cancelled). Two steps:
// runnow.lua moves its due time to the server's now (a ZADD XX, which
// never brings back a member promoted meanwhile) and tells the promoters,
// as an earlier due time does; then PromoteDue. If the second fails, or the
// caller dies before it, the first promoter woken moves it.
func (s *Shard) RunNow(ctx context.Context, id string) (bool, error) {
	if moved, err := s.MakeDueNow(ctx, id); err != nil || !moved {
		return false, err
	}
	if _, _, err := s.PromoteDue(ctx); err != nil {
		return true, fmt.Errorf("prioq: run %q now: it is due, its promotion failed (a promoter woken moves it): %w", id, err)
	}
	return true, nil
}

// MakeDueNow is RunNow's first step alone (runnow.lua): what a caller that
// dies before its promotion leaves.
func (s *Shard) MakeDueNow(ctx context.Context, id string) (bool, error) {
	yes := ""
	if s.sharded() {
		yes = argYes
	}
	var moved int
	if err := s.do(ctx, runNowScript.Cmd(&moved, []string{s.k.delayed, s.k.dstore, s.k.sched, s.k.wake}, id, yes)); err != nil {
		return false, fmt.Errorf("prioq: run %q now: %w", id, err)
	}
	return moved == 1, nil
}

//go:embed lua/runnow.lua
var runNowSrc string
var runNowScript = newScript(runNowSrc)
