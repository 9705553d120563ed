package prioq

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
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

// Two processes' worth of promoters race over the same delayed set: every
// message is delivered exactly once.
func TestConcurrentPromotersMoveOnce(t *testing.T) {
	const n = 2000
	c := newClient(t)
	ctx := ctxT(t, time.Minute)
	q := openQueue(t, c, Config{Mode: AtMostOnce, PromoteBatch: 7})
	items := make([]EnqueueItem, n)
	for i := range items {
		items[i] = EnqueueItem{Payload: []byte("x"), Options: []Option{Delay(time.Duration(i%50) * time.Millisecond)}}
	}
	_, err := q.EnqueueBatch(ctx, items)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 40; j++ {
				_, _, _, err := sh(q).promote(ctx)
				assert.NoError(t, err)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for {
		moved, _, _, err := sh(q).promote(ctx)
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
			var items []EnqueueItem
			for _, id := range []string{"b-9", "b-8", "b-7", "b-10"} {
				items = append(items, EnqueueItem{Payload: []byte("x"), Options: []Option{at, ID(id)}})
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
			moved, _, _, err := sh(q).promoteAt(ctx, fmtInt(time.Now().Add(2*time.Hour).UnixMilli()))
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

func TestSleepCtx(t *testing.T) {
	start := time.Now()
	assert.True(t, sleepCtx(context.Background(), 20*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	assert.False(t, sleepCtx(ctx, time.Hour), "a done ctx ends the sleep")
	assert.Less(t, time.Since(start), time.Second)
}

// The promoter re-arms its timer with Reset whatever the timer's state:
// running, stopped, or fired with its tick not read. That is safe only with
// the timers of go.mod ≥ 1.23 (synchronous channels: Reset drops a tick not
// read); this pins it, and a negative duration firing at once.
func TestTimerResetAsThePromoterUsesIt(t *testing.T) {
	fired := func(tm *time.Timer, within time.Duration) bool {
		select {
		case <-tm.C:
			return true
		case <-time.After(within):
			return false
		}
	}
	tm := time.NewTimer(time.Hour)
	tm.Reset(-time.Second)
	assert.True(t, fired(tm, time.Second), "negative: at once")

	tm = time.NewTimer(time.Millisecond)
	time.Sleep(10 * time.Millisecond) // it fired; nobody read the tick
	tm.Reset(time.Hour)
	assert.False(t, fired(tm, 20*time.Millisecond), "the old tick must not be seen after a reset")

	tm.Stop()
	tm.Reset(0)
	assert.True(t, fired(tm, time.Second), "a stopped timer is armed again")
}
