package prioq

import (
	"context"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// Sample is one reading of a queue's figures in its history (Queue.History).
type Sample struct {
	// At is the minute it stands for (the recording process's clock).
	At time.Time
	// The figures of Stats at that minute.
	Ready, Delayed, InFlight, Dead         int64
	Enqueued, Acked, Retried, DeadLettered int64
}

// History returns the queue's readings since since, oldest first, one a
// minute at most, kept for a day (store.HistoryKeep) in the queue's own
// keys: what a chart opened now shows of the last hour, whoever watched.
// The dashboard records one a minute for each queue it shows
// (RecordHistory), and so can any process that reads Stats. One round
// trip.
func (q *Queue) History(ctx context.Context, since time.Time) ([]Sample, error) {
	xs, err := q.shards[0].History(ctx, since)
	out := make([]Sample, len(xs))
	for i, x := range xs {
		out[i] = Sample{At: x.At, Ready: x.Ready, Delayed: x.Delayed, InFlight: x.InFlight, Dead: x.Dead,
			Enqueued: x.Enqueued, Acked: x.Acked, Retried: x.Retried, DeadLettered: x.DeadLetters}
	}
	return out, err
}

// RecordHistory stores st, a reading made now, as the queue's reading of
// this minute unless the minute has one already: at most two round trips
// a minute. A refusal (maxmemory, an ACL, a key of the wrong type) is
// returned; nothing else depends on the history.
func (q *Queue) RecordHistory(ctx context.Context, st Stats) error {
	now := time.Now()
	s := q.shards[0]
	if has, err := s.HasSample(ctx, now); err != nil || has {
		return err
	}
	return s.AddSample(ctx, store.Sample{At: now, Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight,
		Dead: st.Dead, Enqueued: st.Enqueued, Acked: st.Acked, Retried: st.Retried, DeadLetters: st.DeadLettered})
}
