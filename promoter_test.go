package prioq

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// A promotion that fails (here: the delayed store has the wrong type, as a
// Sentinel failover or a restarting primary fails it with other errors) must
// not leave the promoter computing its sleep from a server clock it never
// learned: the message is delivered soon after the fault clears. Before the
// fix, the failed call reset the learned clock to zero, and the next timeout
// of the marker wait armed a timer for decades.
func TestPromoterRecoversAfterFailedPromotion(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(1)})
	var errs atomic.Int64
	cons := newConsumer(t, q, ConsumerConfig{PromoteWait: 100 * time.Millisecond, RetryInterval: time.Second,
		OnError: func(error) { errs.Add(1) }})

	_, err := q.Enqueue(ctx, []byte("late"), ID("d1"), Delay(700*time.Millisecond))
	require.NoError(t, err)
	// Let the promoter learn the server's clock, then break the store.
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cons.Receive(rctx)
	cancel()
	require.Error(t, err, "nothing is due yet")
	backup := sh(q).Keys().DStore() + ".backup"
	// Atomically, so that no promotion sees the store missing (see below).
	require.NoError(t, sh(q).Client().Do(ctx, radix.NewEvalScript(
		`redis.call('RENAME', KEYS[1], KEYS[2]) redis.call('SET', KEYS[1], 'wrong type')`,
	).Cmd(nil, []string{sh(q).Keys().DStore(), backup})))

	require.Eventually(t, func() bool { return errs.Load() > 0 }, 5*time.Second, 10*time.Millisecond,
		"the promotion at the due time fails")
	time.Sleep(500 * time.Millisecond) // several marker-wait timeouts while broken
	// One RENAME replaces the wrong-typed key atomically. (A DEL first would
	// let a promotion in between find the member without its record and drop
	// it as an orphan: CI once lost the message that way.)
	require.NoError(t, sh(q).Client().Do(ctx, radix.Cmd(nil, "RENAME", backup, sh(q).Keys().DStore())))
	healed := time.Now()

	rctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := cons.Receive(rctx)
	require.NoError(t, err, "the due message is promoted once the fault clears")
	require.Equal(t, "d1", m.ID)
	require.NoError(t, m.Ack(ctx))
	t.Logf("delivered %v after the fault cleared (%d background errors)", time.Since(healed).Round(time.Millisecond), errs.Load())
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
				_, _, _, err := sh(q).Promote(ctx)
				assert.NoError(t, err)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for {
		moved, _, _, err := sh(q).Promote(ctx)
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
			store.SetIDCounter(65533) // the next ids wrap from 65535 to 0
			for i := 0; i < 6; i++ {
				id, err := q.Enqueue(ctx, []byte("x"), at)
				require.NoError(t, err)
				want = append(want, id)
			}
			moved, _, _, err := sh(q).PromoteAt(ctx, fmtInt(time.Now().Add(2*time.Hour).UnixMilli()))
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

// A promoter that stops puts the sched marker back: a marker it popped
// just before Close (and never acted on) would otherwise be gone, and the
// other promoters would learn of the earlier due time only at PromoteWait.
func TestStoppingPromoterPutsTheMarkerBack(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	name := queueName(t)
	var cons atomic.Pointer[Consumer]
	ready, popped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	k := store.KeysOf(name, DefaultLevels)
	// Stop the consumer the moment its promoter's wait pops the marker.
	stopOnPop := clientFunc(func(ctx context.Context, a radix.Action) error {
		err := c.Do(ctx, a)
		if keys := a.Properties().Keys; err == nil && len(keys) == 1 && keys[0] == k.Sched() && !a.Properties().CanShareConn {
			once.Do(func() {
				<-ready
				cons.Load().stop()
				close(popped)
			})
		}
		return err
	})
	q, err := Open(ctx, stopOnPop, name, Config{})
	require.NoError(t, err)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "RPUSH", k.Sched(), "1")))
	cn, err := q.NewConsumer(ConsumerConfig{})
	require.NoError(t, err)
	cons.Store(cn)
	close(ready)
	<-popped
	require.NoError(t, cn.Close(ctx))
	var n int
	require.NoError(t, c.Do(ctx, radix.Cmd(&n, "LLEN", k.Sched())))
	assert.Equal(t, 1, n, "the marker is back for the other promoters")
}
