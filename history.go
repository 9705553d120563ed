package prioq

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
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
// Every Consumer of the queue with a heartbeat records one a minute, at a
// few seconds past the minute (recordHistory: the first of them to ask
// reads the figures, the others see the minute taken), so the history
// covers the time consumers ran whether or not anyone watched; a
// MultiConsumer does not (it may serve thousands of queues). The dashboard
// records one a minute for each queue it shows, and any process that
// reads Stats can (RecordHistory). One round trip.
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
	return q.addSample(ctx, now, st)
}

// addSample stores st as the reading of now's minute, unasked.
func (q *Queue) addSample(ctx context.Context, now time.Time, st Stats) error {
	return q.shards[0].AddSample(ctx, store.Sample{At: now, Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight,
		Dead: st.Dead, Enqueued: st.Enqueued, Acked: st.Acked, Retried: st.Retried, DeadLetters: st.DeadLettered})
}

// historyEvery is how often consumers record the history: a minute (0), or
// shorter in tests.
var historyEvery atomic.Int64

// recordHistory records the queue's reading of each minute from a
// consumer, until ctx ends: at the minute plus up to a twelfth of it at
// random (a fleet of consumers does not ask all at once), never at once at
// start (a consumer that lives less than a minute records nothing, and
// starting one costs nothing more). Only a consumer that finds the minute
// not yet recorded reads Stats. Each round has its own deadline; a
// failure (an ACL without the commands, maxmemory, a history key of the
// wrong type) skips that minute and is not reported: nothing depends on
// the history, and History reports the same failure to whoever reads it.
func (q *Queue) recordHistory(ctx context.Context) {
	for {
		every := time.Duration(historyEvery.Load())
		if every <= 0 {
			every = time.Minute
		}
		now := time.Now()
		wait := now.Truncate(every).Add(every).Sub(now) + rand.N(every/12+1)
		if !sleepCtx(ctx, wait) {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, min(q.cfg.CallTimeout, 2*time.Second))
		if has, err := q.shards[0].HasSample(rctx, time.Now()); err == nil && !has {
			if st, err := q.Stats(rctx); err == nil {
				_ = q.addSample(rctx, time.Now(), st) // asked just above: not again
			}
		}
		cancel()
	}
}
