package prioq

import (
	"context"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/require"
)

// The failure totals: a retry counts in Retried, a message that runs out of
// attempts in DeadLettered (by a failure or by the sweep), a lease that ends
// unacked in Expired; on a queue of several shards they add up.
func TestStatsCountFailures(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(map[int]string{1: "OneShard", 2: "Sharded"}[shards], func(t *testing.T) {
			cl := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, cl, Config{Layout: Levels(2), MaxAttempts: 2, Shards: shards})
			c := newConsumer(t, q, ConsumerConfig{Lease: time.Minute})
			_, err := q.Enqueue(ctx, []byte("fails twice"))
			require.NoError(t, err)
			m, err := c.Receive(ctx)
			require.NoError(t, err)
			require.NoError(t, m.Retry(ctx, 0, "once"))
			m, err = c.Receive(ctx)
			require.NoError(t, err)
			require.NoError(t, m.Retry(ctx, 0, "twice")) // MaxAttempts 2: dead
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, [3]int64{1, 1, 0}, [3]int64{st.Retried, st.DeadLettered, st.Expired})

			// A lease that ends: Expired, then, out of attempts, DeadLettered
			// by the sweep.
			short := newConsumer(t, q, ConsumerConfig{Lease: 30 * time.Millisecond, SweepInterval: 20 * time.Millisecond, NoPromoter: true})
			_, err = q.Enqueue(ctx, []byte("held too long"))
			require.NoError(t, err)
			for range 2 {
				_, err := short.Receive(ctx) // never acked
				require.NoError(t, err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				st, err = q.Stats(ctx)
				require.NoError(t, err)
				if st.DeadLettered == 2 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			require.Equal(t, [3]int64{1, 2, 1}, [3]int64{st.Retried, st.DeadLettered, st.Expired})
			require.Equal(t, int64(2), st.Dead)
		})
	}
}

// Messages waiting in groups have an age: a tenant held at its rate limit
// with messages waiting shows their age, not "0s", and counts as parked;
// so does a group whose marker heads its lane. Before, both read 0.
func TestOldestReadyCountsGroups(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		prio int64
	}{
		{"Levels", Config{Layout: Levels(3)}, 1},
		{"Range", Config{Layout: Range(0, 100, 4)}, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, cl, tc.cfg)
			for range 5 {
				_, err := q.Enqueue(ctx, []byte("x"), Group("tenant"), Priority(tc.prio))
				require.NoError(t, err)
			}
			if tc.name == "Levels" {
				time.Sleep(150 * time.Millisecond)
				st, err := q.Stats(ctx)
				require.NoError(t, err)
				require.True(t, st.OldestReady >= 150*time.Millisecond, "a group's marker heads the lane: %v", st.OldestReady)
			}
			require.NoError(t, q.SetGroupLimit(ctx, "tenant", GroupLimit{Rate: Rate{N: 1, Per: time.Hour}}))
			c := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			m, err := c.Receive(ctx)
			require.NoError(t, err)
			require.NoError(t, m.Ack(ctx))
			short := ctxT(t, 100*time.Millisecond)
			_, err = c.Receive(short) // the group is at its rate limit: parked
			require.ErrorIs(t, err, context.DeadlineExceeded)
			time.Sleep(200 * time.Millisecond)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(4), st.Ready)
			require.Equal(t, int64(1), st.GroupsParked)
			require.True(t, st.OldestReady >= 300*time.Millisecond && st.OldestReady < 10*time.Second, "oldest ready %v", st.OldestReady)
		})
	}
}
