package prioq

import (
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Expired leases come back in the order their messages were taken (their
// age in the lane), not in the order the leases ended: an Extend or two takes
// in one millisecond must not reorder them. Before the fix Levels put the
// newer one first (always with the Extend; 12 of 30 runs with the takes).
func TestRedeliveryKeepsAgeOrder(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name+"/extend", func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			ids := []string{"a", "b", "c"}
			enqueueIDs(ctx, t, q, ids...)
			older, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, 50*time.Millisecond)
			require.NoError(t, err)
			_, _, err = shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, 50*time.Millisecond)
			require.NoError(t, err)
			require.NoError(t, older[0].Extend(ctx, 100*time.Millisecond))
			time.Sleep(150 * time.Millisecond)
			_, _, _, err = sh(q).Sweep(ctx, 100)
			require.NoError(t, err)
			assert.Equal(t, ids, liveIDs(t, q))
		})
		t.Run(l.name+"/same millisecond", func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			for run := range 30 {
				ids := []string{"a", "b", "c"}
				enqueueIDs(ctx, t, q, ids...)
				for range 2 {
					_, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, 2*time.Millisecond)
					require.NoError(t, err)
				}
				time.Sleep(5 * time.Millisecond)
				_, _, _, err := sh(q).Sweep(ctx, 100)
				require.NoError(t, err)
				require.Equal(t, ids, liveIDs(t, q), "run %d", run)
				_, err = q.Purge(ctx)
				require.NoError(t, err)
			}
		})
	}
}

func TestLeaseExpiryRedeliversAndFencesStaleAcks(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			a, err := q.Enqueue(ctx, []byte("a"), Priority(3))
			require.NoError(t, err)
			cons := newConsumer(t, q, ConsumerConfig{Lease: 300 * time.Millisecond, SweepInterval: 50 * time.Millisecond})

			first, err := cons.Receive(ctx)
			require.NoError(t, err)
			require.Equal(t, a, first.ID)
			assert.Equal(t, 1, first.Attempts)
			b, err := q.Enqueue(ctx, []byte("b"), Priority(3)) // newer, same priority
			require.NoError(t, err)
			// No ack: the lease expires and the sweep puts a back, ahead of b.
			require.Eventually(t, func() bool {
				st, err := q.Stats(ctx)
				return err == nil && st.InFlight == 0 && st.Ready == 2
			}, 5*time.Second, 10*time.Millisecond)
			second, err := cons.Receive(ctx)
			require.NoError(t, err)
			require.Equal(t, a, second.ID, "an expired message is served before newer ones of its priority")
			assert.Equal(t, 2, second.Attempts)
			assert.False(t, time.Now().Before(first.LeaseDeadline()), "redelivered before the lease ended")

			// The first delivery's lease is gone: its ack and extend fail and
			// leave the new lease alone.
			assert.ErrorIs(t, first.Ack(ctx), ErrLeaseLost)
			assert.ErrorIs(t, first.Extend(ctx, time.Minute), ErrLeaseLost)
			assert.ErrorIs(t, first.Retry(ctx, time.Millisecond, "stale"), ErrLeaseLost)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.EqualValues(t, 1, st.InFlight)
			assert.EqualValues(t, 1, st.Ready)

			require.NoError(t, second.Extend(ctx, 10*time.Second))
			time.Sleep(500 * time.Millisecond) // past the original lease: Extend kept it
			require.NoError(t, second.Ack(ctx))
			third, err := cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, b, third.ID)
			require.NoError(t, third.Ack(ctx))
			st, err = q.Stats(ctx)
			require.NoError(t, err)
			assert.Zero(t, st.Ready+st.InFlight+st.Dead+st.Delayed)
		})
	}
}

// Expired leases come back ahead of newer messages and in the order they were
// taken, also when a sweep needs several calls and when one take leased more
// than nine messages (lease tokens of one take sort in take order).
func TestExpiredLeasesComeBackInOrder(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			var want []string
			for i := 0; i < 25; i++ {
				id, err := q.Enqueue(ctx, []byte("x"), Priority(1))
				require.NoError(t, err)
				want = append(want, id)
			}
			first, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 12, time.Millisecond)
			require.NoError(t, err)
			second, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 12, 20*time.Millisecond)
			require.NoError(t, err)
			require.Len(t, append(first, second...), 24)
			newer, err := q.Enqueue(ctx, []byte("newer"), Priority(1))
			require.NoError(t, err)
			time.Sleep(50 * time.Millisecond)
			for {
				_, _, more, err := sh(q).Sweep(ctx, 5) // five at a time: several calls
				require.NoError(t, err)
				if !more {
					break
				}
			}
			peek, err := q.Peek(ctx, 100)
			require.NoError(t, err)
			var got []string
			for _, m := range peek {
				got = append(got, m.ID)
			}
			assert.Equal(t, append(want, newer), got)
		})
	}
}
