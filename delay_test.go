package prioq

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Delayed messages are never handed out before their due time, and arrive soon
// after it. The bound here is generous (the machine may be loaded); precise
// lateness is measured by the benchmark.
func TestDelayedNeverEarlyAndPrompt(t *testing.T) {
	const n = 150
	c := newClient(t)
	for _, m := range bothModes {
		for _, l := range someLayouts {
			t.Run(m.name+"/"+l.name, func(t *testing.T) {
				t.Parallel()
				ctx := ctxT(t, time.Minute)
				q := openQueue(t, c, Config{Layout: l.layout, Mode: m.mode})
				rng := newRand(t)
				due := make(map[string]time.Time, n)
				var mu sync.Mutex
				for i := 0; i < n; i++ {
					d := time.Duration(rng.IntN(600)) * time.Millisecond
					before := time.Now()
					id, err := q.Enqueue(ctx, []byte("x"), Delay(d))
					require.NoError(t, err)
					mu.Lock()
					due[id] = before.Add(d)
					mu.Unlock()
				}
				cons := newConsumer(t, q, ConsumerConfig{})
				var worst time.Duration
				for i := 0; i < n; i++ {
					msg, err := cons.Receive(ctx)
					require.NoError(t, err)
					now := time.Now()
					mu.Lock()
					d, ok := due[msg.ID]
					delete(due, msg.ID)
					mu.Unlock()
					require.True(t, ok, "unknown or repeated id %s", msg.ID)
					require.False(t, now.Before(d), "message %s handed out %v early", msg.ID, d.Sub(now))
					worst = max(worst, now.Sub(d))
					if m.mode == AtLeastOnce {
						require.NoError(t, msg.Ack(ctx))
					}
				}
				t.Logf("worst lateness %v", worst)
				assert.Less(t, worst, time.Second)
			})
		}
	}
}

// The promoter sleeps until the earliest due time; a message scheduled
// earlier than that must wake it, not wait for the old timer.
func TestPromoterWokenByEarlierMessage(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Mode: m.mode})
			_, err := q.Enqueue(ctx, []byte("late"), Delay(20*time.Second))
			require.NoError(t, err)
			// PromoteWait is long, so only the sched marker can wake it early.
			cons := newConsumer(t, q, ConsumerConfig{PromoteWait: 30 * time.Second})
			time.Sleep(200 * time.Millisecond) // the promoter is now asleep until +20s
			start := time.Now()
			id, err := q.Enqueue(ctx, []byte("early"), Delay(300*time.Millisecond))
			require.NoError(t, err)
			msg, err := cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, id, msg.ID)
			took := time.Since(start)
			assert.GreaterOrEqual(t, took, 300*time.Millisecond)
			assert.Less(t, took, 2*time.Second)
		})
	}
}

// Two processes' worth of promoters race over the same delayed set: every
// message is delivered exactly once.
func TestConcurrentPromotersMoveOnce(t *testing.T) {
	const n = 2000
	c := newClient(t)
	ctx := ctxT(t, time.Minute)
	q := openQueue(t, c, Config{Mode: AtMostOnce, PromoteBatch: 7})
	items := make([]Item, n)
	for i := range items {
		items[i] = Item{Payload: []byte("x"), Options: []Option{Delay(time.Duration(i%50) * time.Millisecond)}}
	}
	_, err := q.EnqueueBatch(ctx, items)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 40; j++ {
				_, _, _, err := q.promote(ctx)
				assert.NoError(t, err)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for {
		moved, _, _, err := q.promote(ctx)
		require.NoError(t, err)
		if moved == 0 {
			break
		}
	}
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, n, st.Ready)
	assert.Zero(t, st.Delayed)
}

// Messages due at the same instant become ready in the order they were
// enqueued, whatever their ids: caller ids that sort otherwise, a batch, and
// generated ids whose 16-bit counter wraps between them.
func TestEqualDueTimesKeepEnqueueOrder(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout, Mode: AtMostOnce})
			at := At(time.Now().Add(time.Hour))
			var want []string
			for _, id := range []string{"order-3", "order-2", "order-10", "order-1"} {
				_, err := q.Enqueue(ctx, []byte("x"), at, ID(id))
				require.NoError(t, err)
				want = append(want, id)
			}
			var items []Item
			for _, id := range []string{"b-9", "b-8", "b-7", "b-10"} {
				items = append(items, Item{Payload: []byte("x"), Options: []Option{at, ID(id)}})
				want = append(want, id)
			}
			_, err := q.EnqueueBatch(ctx, items)
			require.NoError(t, err)
			idCounter.Store(65533) // the next ids wrap from 65535 to 0
			for i := 0; i < 6; i++ {
				id, err := q.Enqueue(ctx, []byte("x"), at)
				require.NoError(t, err)
				want = append(want, id)
			}
			moved, _, _, err := q.promoteAt(ctx, fmtInt(time.Now().Add(2*time.Hour).UnixMilli()))
			require.NoError(t, err)
			require.Equal(t, len(want), moved)
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			var got []string
			for range want {
				m, err := cons.Receive(ctx)
				require.NoError(t, err)
				got = append(got, m.ID)
			}
			assert.Equal(t, want, got)
		})
	}
}
