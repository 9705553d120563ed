package prioq

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Limits are tested at and beyond their edge: the largest batch a script can
// take in one call used to exceed Lua's unpack limit (~8,000 values) after
// the script had already popped, and those messages were gone.

// fillBatch enqueues n ready messages in batches of at most MaxBatch.
func fillBatch(t *testing.T, ctx context.Context, q *Queue, n int, opts ...Option) {
	t.Helper()
	for done := 0; done < n; {
		k := min(MaxBatch, n-done)
		items := make([]Item, k)
		for i := range items {
			items[i] = Item{Payload: []byte(fmt.Sprintf("m%d", done+i)), Options: opts}
		}
		_, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
		done += k
	}
}

func TestReceiveBatchAtAndBeyondTheLimit(t *testing.T) {
	c := newClient(t)
	for _, l := range []struct {
		name   string
		layout Layout
	}{{"Levels1", Levels(1)}, {"Range", Range(0, 100, 3)}} {
		for _, n := range []int{MaxBatch, 4 * MaxBatch} {
			t.Run(fmt.Sprintf("%s/n=%d", l.name, n), func(t *testing.T) {
				ctx := ctxT(t, 60*time.Second)
				q := openQueue(t, c, Config{Layout: l.layout})
				const total = MaxBatch + 2000
				fillBatch(t, ctx, q, total)
				cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
				got, err := cons.ReceiveBatch(ctx, n)
				require.NoError(t, err)
				assert.Len(t, got, MaxBatch, "one round trip takes at most MaxBatch")
				st, err := q.Stats(ctx)
				require.NoError(t, err)
				assert.EqualValues(t, len(got), st.InFlight, "every message taken is leased")
				assert.EqualValues(t, total, st.Ready+st.InFlight, "nothing lost")
				errs := AckBatch(ctx, got...)
				for _, err := range errs {
					require.NoError(t, err)
				}
			})
		}
	}
}

func TestRunWithHugeConcurrencyLosesNothing(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 120*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(1)})
	const total = 12000
	fillBatch(t, ctx, q, total)
	cons := newConsumer(t, q, ConsumerConfig{Concurrency: total, NoPromoter: true})
	var mu sync.Mutex
	seen := map[string]int{}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- cons.Run(runCtx, func(ctx context.Context, m *Message) error {
			mu.Lock()
			seen[string(m.Payload)]++
			mu.Unlock()
			return nil
		})
	}()
	require.Eventually(t, func() bool {
		st, err := q.Stats(ctx)
		return err == nil && st.Ready == 0 && st.InFlight == 0
	}, 90*time.Second, 50*time.Millisecond, "the queue drains")
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, seen, total, "every message handled")
	for p, n := range seen {
		if n != 1 {
			t.Errorf("%s handled %d times", p, n)
		}
	}
}

func TestPromoteBatchAtAndBeyondTheLimit(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout, Mode: AtMostOnce, PromoteBatch: MaxBatch})
			const total = MaxBatch + 500     // more than one promotion, all due at one instant
			due := time.Now().Add(time.Hour) // promoted below in virtual time
			fillBatch(t, ctx, q, total, At(due))
			at := fmtInt(due.UnixMilli() + 1)
			moved, next, _, err := q.promoteAt(ctx, at)
			require.NoError(t, err)
			assert.Equal(t, MaxBatch, moved)
			assert.Zero(t, next, "the rest is due at the same instant")
			moved, next, _, err = q.promoteAt(ctx, at)
			require.NoError(t, err)
			assert.Equal(t, 500, moved)
			assert.Equal(t, time.Duration(-1), next)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.EqualValues(t, total, st.Ready)
			assert.Zero(t, st.Delayed)
		})
	}
	t.Run("beyond", func(t *testing.T) {
		_, err := Open(context.Background(), c, queueName(t), Config{PromoteBatch: MaxBatch + 1})
		assert.ErrorIs(t, err, ErrInvalidOption)
	})
}

func TestEnqueueBatchBeyondTheLimitWritesNothing(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 30*time.Second)
	q := openQueue(t, c, Config{})
	items := make([]Item, MaxBatch+1)
	for i := range items {
		items[i] = Item{Payload: []byte("x")}
	}
	_, err := q.EnqueueBatch(ctx, items)
	require.ErrorIs(t, err, ErrInvalidOption)
	assert.Empty(t, existingKeys(t, q))
	res, err := q.EnqueueBatch(ctx, items[:MaxBatch])
	require.NoError(t, err)
	assert.Len(t, res, MaxBatch)
}

func TestPurgeKeepsIDsOfLiveMessages(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			_, err := q.Enqueue(ctx, []byte("in flight"), ID("flying"))
			require.NoError(t, err)
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			flying, err := cons.Receive(ctx)
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte("dead"), ID("dead-1"))
			require.NoError(t, err)
			m, err := cons.Receive(ctx)
			require.NoError(t, err)
			require.NoError(t, q.failToken(ctx, m.token, 0, "no", "dead"))
			_, err = q.Enqueue(ctx, []byte("ready"), ID("ready-1"))
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte("later"), ID("later-1"), Delay(time.Hour))
			require.NoError(t, err)

			n, err := q.Purge(ctx)
			require.NoError(t, err)
			assert.EqualValues(t, 2, n)
			for _, id := range []string{"flying", "dead-1"} {
				_, err := q.Enqueue(ctx, []byte("copy"), ID(id))
				assert.ErrorIs(t, err, ErrDuplicate, "%s is still alive", id)
			}
			for _, id := range []string{"ready-1", "later-1"} {
				_, err := q.Enqueue(ctx, []byte("again"), ID(id))
				assert.NoError(t, err, "%s was purged", id)
			}
			require.NoError(t, flying.Ack(ctx))
		})
	}
}

func TestExponentialBackoffNeverOverflows(t *testing.T) {
	for _, c := range []struct{ base, max time.Duration }{
		{time.Second, math.MaxInt64},
		{time.Second, time.Hour},
		{time.Nanosecond, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64},
		{0, time.Hour},
		{-time.Second, time.Hour},
	} {
		b := ExponentialBackoff(c.base, c.max)
		for a := -1; a <= 300; a++ {
			d := b(a)
			want := max(c.base, 0) // the undithered delay doubles from base up to max
			for i := 1; i < a && want < c.max; i++ {
				if want > c.max/2 {
					want = c.max
				} else {
					want *= 2
				}
			}
			want = min(want, c.max)
			if d < 0 || d > want || (want > 1 && d < want/2) {
				t.Fatalf("ExponentialBackoff(%v, %v)(%d) = %v, want [%v, %v]", c.base, c.max, a, d, want/2, want)
			}
		}
	}
}

func TestOpenNilClient(t *testing.T) {
	assert.NotPanics(t, func() {
		_, err := Open(context.Background(), nil, "q", Config{})
		assert.ErrorIs(t, err, ErrInvalidOption)
	})
}
