package prioq

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Limits are tested at and beyond their edge: the largest batch a script can
// take in one call used to exceed Lua's unpack limit (~8,000 values) after
// the script had already popped, and those messages were gone.

// fillBatch enqueues n ready messages in batches of at most MaxBatch.
func fillBatch(t *testing.T, ctx context.Context, q *Queue, n int, opts ...Option) {
	t.Helper()
	for done := 0; done < n; {
		k := min(MaxBatch, n-done)
		items := make([]EnqueueItem, k)
		for i := range items {
			items[i] = EnqueueItem{Payload: []byte(fmt.Sprintf("m%d", done+i)), Options: opts}
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
			moved, next, _, err := sh(q).PromoteAt(ctx, at)
			require.NoError(t, err)
			assert.Equal(t, MaxBatch, moved)
			assert.Zero(t, next, "the rest is due at the same instant")
			moved, next, _, err = sh(q).PromoteAt(ctx, at)
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
	items := make([]EnqueueItem, MaxBatch+1)
	for i := range items {
		items[i] = EnqueueItem{Payload: []byte("x")}
	}
	_, err := q.EnqueueBatch(ctx, items)
	require.ErrorIs(t, err, ErrInvalidOption)
	assert.Empty(t, existingKeys(t, q))
	res, err := q.EnqueueBatch(ctx, items[:MaxBatch])
	require.NoError(t, err)
	assert.Len(t, res, MaxBatch)
}

// Groups at the largest batch: a take of MaxBatch whose pop meets a group's
// marker behind ~9,000 plain messages, and one that takes MaxBatch messages
// of a single group, lease them all, lose none and count them right. Failed
// before: the take copied the messages ahead of the marker with unpack, and
// added the group's lease tokens with unpack, both past Lua's ~8,000 values,
// after the pop (the first case lost the 9,000 messages popped).
func TestGroupsAtTheLargestBatch(t *testing.T) {
	c := newClient(t)
	for _, tc := range []struct {
		name         string
		plain, group int
	}{{"marker behind 9000", 9000, 10}, {"one group of MaxBatch", 0, MaxBatch + 10}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 120*time.Second)
			q := openQueue(t, c, Config{Layout: Levels(1)})
			fillBatch(t, ctx, q, tc.plain)
			fillBatch(t, ctx, q, tc.group, Group("g"))
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			got, err := cons.ReceiveBatch(ctx, MaxBatch)
			require.NoError(t, err)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.EqualValues(t, len(got), st.InFlight, "every message taken is leased")
			assert.EqualValues(t, tc.plain+tc.group, st.Ready+st.InFlight, "nothing lost")
			gs, err := q.Groups(ctx, 0)
			require.NoError(t, err)
			inGroup := 0
			for _, m := range got {
				if m.Group == "g" {
					inGroup++
				}
			}
			require.Len(t, gs, 1)
			assert.EqualValues(t, tc.group-inGroup, gs[0].Ready)
			assert.EqualValues(t, inGroup, gs[0].InFlight)
			var tokens int
			require.NoError(t, c.Do(ctx, radix.Cmd(&tokens, "SCARD", sh(q).Keys().GroupLeases("g"))))
			assert.Equal(t, inGroup, tokens, "every lease of the group counted")
			for _, err := range AckBatch(ctx, got...) {
				require.NoError(t, err)
			}
		})
	}
}
