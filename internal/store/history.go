package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// A queue's history: one reading of its figures a minute, a day of them, in
// the sorted set hist (keys.go) of its first shard, so that a chart opened
// now can show the last hour whoever was watching. Best effort: a write
// refused (maxmemory, a key of the wrong type, an ACL) is not an error of
// the work that makes it, and two processes that record the same minute at
// once leave two readings of it (readers keep one).

// HistoryKeep is how long readings are kept.
const HistoryKeep = 24 * time.Hour

// Sample is one reading of a queue's figures.
type Sample struct {
	At                                    time.Time // the minute it stands for
	Ready, Delayed, InFlight, Dead        int64
	Enqueued, Acked, Retried, DeadLetters int64
}

// HasSample reports whether the minute of at has its reading already. One
// round trip.
func (s *Shard) HasSample(ctx context.Context, at time.Time) (bool, error) {
	t := strconv.FormatInt(at.Truncate(time.Minute).UnixMilli(), 10)
	var n int
	if err := s.do(ctx, radix.Cmd(&n, "ZCOUNT", s.k.hist, t, t)); err != nil {
		return false, fmt.Errorf("prioq: history of %q: %w", s.name, err)
	}
	return n > 0, nil
}

// AddSample stores x as the reading of its minute and drops those older
// than HistoryKeep. One round trip.
func (s *Shard) AddSample(ctx context.Context, x Sample) error {
	t := x.At.Truncate(time.Minute).UnixMilli()
	member := strings.Join([]string{strconv.FormatInt(t, 10),
		fmtInt(x.Ready), fmtInt(x.Delayed), fmtInt(x.InFlight), fmtInt(x.Dead),
		fmtInt(x.Enqueued), fmtInt(x.Acked), fmtInt(x.Retried), fmtInt(x.DeadLetters)}, "|")
	return s.doPipeline(ctx, func() *radix.Pipeline {
		p := radix.NewPipeline()
		// The trim first: it frees memory, and at maxmemory the ZADD alone
		// is refused.
		p.Append(radix.Cmd(nil, "ZREMRANGEBYSCORE", s.k.hist, "-inf", "("+strconv.FormatInt(t-HistoryKeep.Milliseconds(), 10)))
		p.Append(radix.Cmd(nil, "ZADD", s.k.hist, strconv.FormatInt(t, 10), member))
		return p
	})
}

// History returns the readings since since, oldest first, one per minute
// (of two of a minute, the first in the set's order).
// A member that does not parse is skipped. One round trip.
func (s *Shard) History(ctx context.Context, since time.Time) ([]Sample, error) {
	var members []string
	if err := s.do(ctx, radix.Cmd(&members, "ZRANGEBYSCORE", s.k.hist, strconv.FormatInt(since.UnixMilli(), 10), "+inf")); err != nil {
		return nil, fmt.Errorf("prioq: history of %q: %w", s.name, err)
	}
	var out []Sample
	for _, m := range members {
		f := strings.Split(m, "|")
		if len(f) != 9 {
			continue
		}
		var v [9]int64
		ok := true
		for i := range f {
			n, err := strconv.ParseInt(f[i], 10, 64)
			ok = ok && err == nil
			v[i] = n
		}
		if !ok || len(out) > 0 && out[len(out)-1].At.UnixMilli() == v[0] {
			continue
		}
		out = append(out, Sample{At: time.UnixMilli(v[0]), Ready: v[1], Delayed: v[2], InFlight: v[3], Dead: v[4],
			Enqueued: v[5], Acked: v[6], Retried: v[7], DeadLetters: v[8]})
	}
	return out, nil
}
