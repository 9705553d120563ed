package prioq

import (
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/require"
)

// RecordHistory keeps the queue's figures of this minute in its history,
// which any process reads back; a minute is recorded once however many
// times it is asked; readings older than a day go; a damaged reading is skipped; a
// history key of the wrong type is an error for History and RecordHistory,
// and the consumer works on.
func TestHistoryKeptInRedis(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	for range 3 {
		_, err := q.Enqueue(ctx, []byte("x"))
		require.NoError(t, err)
	}
	start := time.Now()
	c := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	first, err := q.Stats(ctx)
	require.NoError(t, err)
	require.NoError(t, q.RecordHistory(ctx, first))
	xs, err := q.History(ctx, start.Add(-2*time.Minute))
	require.NoError(t, err)
	require.True(t, len(xs) >= 1, "no reading recorded")
	last := xs[len(xs)-1]
	require.Equal(t, int64(3), last.Ready)
	require.Equal(t, int64(3), last.Enqueued)
	require.True(t, !last.At.After(time.Now()) && time.Since(last.At) < 2*time.Minute, "%v", last.At)

	// The same minute again: still one reading of it.
	st := first
	require.NoError(t, q.RecordHistory(ctx, st))
	require.NoError(t, q.RecordHistory(ctx, st))
	again, err := q.History(ctx, start.Add(-2*time.Minute))
	require.NoError(t, err)
	require.Equal(t, len(xs), len(again))

	// A day and more ago goes with the next write; a damaged member is skipped.
	s := q.shards[0]
	require.NoError(t, s.AddSample(ctx, store.Sample{At: time.Now().Add(-25 * time.Hour), Ready: 9}))
	old, err := q.History(ctx, time.Now().Add(-26*time.Hour))
	require.NoError(t, err)
	require.Equal(t, len(xs)+1, len(old))
	require.NoError(t, s.AddSample(ctx, store.Sample{At: time.Now(), Ready: 3})) // a second of this minute: readers keep one
	old, err = q.History(ctx, time.Now().Add(-26*time.Hour))
	require.NoError(t, err)
	require.Equal(t, len(xs), len(old), "the day-old reading went with the next write")
	require.Equal(t, int64(3), old[len(old)-1].Ready)
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "ZADD", s.Keys().Prefix()+"hist", "1", "not|a|reading")))
	kept, err := q.History(ctx, time.Now().Add(-26*time.Hour))
	require.NoError(t, err)
	require.Equal(t, len(xs), len(kept))

	// The wrong type: an error, and the consumer goes on.
	hist := s.Keys().Prefix() + "hist"
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "DEL", hist)))
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "SET", hist, "x")))
	_, err = q.History(ctx, start)
	require.Error(t, err)
	require.Error(t, q.RecordHistory(ctx, st))
	m, err := c.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Ack(ctx))
}

// Consumers record the history on their own, once a minute (here every
// 300 ms), without a dashboard; one without heartbeat does not; several
// consumers keep one reading per minute. (Issue 32: "history kept ... so
// that a page opened now shows the last hour": before, only the dashboard
// recorded, so a queue nobody watched had none.)
func TestConsumersRecordHistory(t *testing.T) {
	historyEvery.Store(int64(300 * time.Millisecond))
	t.Cleanup(func() { historyEvery.Store(0) })
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)

	quiet := openQueue(t, cl, Config{Layout: Levels(2)})
	newConsumer(t, quiet, ConsumerConfig{NoPromoter: true, NoHeartbeat: true})

	q, err := Open(ctx, cl, quiet.Name()+"-recorded", Config{Layout: Levels(2)})
	require.NoError(t, err)
	for range 3 {
		_, err := q.Enqueue(ctx, []byte("x"))
		require.NoError(t, err)
	}
	start := time.Now()
	for range 3 {
		newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	}
	var xs []Sample
	require.Eventually(t, func() bool {
		xs, err = q.History(ctx, start.Add(-2*time.Minute))
		return err == nil && len(xs) > 0
	}, 10*time.Second, 50*time.Millisecond, "no reading recorded by the consumers")
	require.Equal(t, int64(3), xs[0].Ready)
	require.Equal(t, int64(3), xs[0].Enqueued)
	time.Sleep(time.Second) // more rounds of the three consumers
	xs, err = q.History(ctx, start.Add(-2*time.Minute))
	require.NoError(t, err)
	require.True(t, len(xs) <= 2, "one reading a minute (two if a minute turned): %d", len(xs))

	none, err := quiet.History(ctx, start.Add(-2*time.Minute))
	require.NoError(t, err)
	require.Equal(t, 0, len(none), "a consumer without heartbeat records nothing")
}
