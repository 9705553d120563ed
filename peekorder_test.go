package prioq

import (
	"fmt"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// keyOfShard is an ordering key that routes to shard i of q.
func keyOfShard(q *Queue, i int) string {
	for k := 0; ; k++ {
		if key := fmt.Sprint("key-", k); q.hashShard(key) == i {
			return key
		}
	}
}

// Peek of a queue of several shards shows the order one consumer receives
// the messages in (issue 29 item 14): by priority; within a shard, in the
// order of its lanes (a requeued dead letter at the tail of its priority,
// whatever its enqueue time); between shards of the same priority, as the
// consumer's fan-in breaks ties. Failed on issue 29's base: Peek sorted by
// EnqueuedAt, and showed the requeued message first.
func TestShardedPeekShowsTheOrderAConsumerReceives(t *testing.T) {
	c := newClient(t)
	layouts := []struct {
		name   string
		layout Layout
	}{{"Levels3", Levels(3)}, {"Range", Range(0, 99, 2)}}
	for _, l := range layouts {
		for _, m := range bothModes {
			for _, shards := range []int{2, 3} {
				t.Run(fmt.Sprintf("%s/%s/%d", l.name, m.name, shards), func(t *testing.T) {
					for trial := range 5 {
						testShardedPeekOrder(t, c, l.layout, m.mode, shards, trial)
					}
				})
			}
		}
	}
}

func testShardedPeekOrder(t *testing.T, c Client, layout Layout, mode Mode, shards, trial int) {
	ctx := ctxT(t, 30*time.Second)
	q := openQueue(t, c, Config{Layout: layout, Mode: mode, Shards: shards})
	keys := make([]string, shards)
	for i := range keys {
		keys[i] = keyOfShard(q, i)
	}
	put := func(p int64, shard int, payload string) string {
		t.Helper()
		id, err := q.Enqueue(ctx, []byte(payload), Priority(p), OrderingKey(keys[shard]))
		require.NoError(t, err)
		return id
	}
	// A: the first message of all, dead-lettered, then requeued after the
	// others: at the tail of its priority in its shard (AtLeastOnce; an
	// AtMostOnce queue has no dead letters of its own making).
	var a string
	if mode == AtLeastOnce {
		a = put(1, 0, "A")
		s := q.shards[0]
		msgs, _, err := shardTake(s, ctx, s.Keys().HighFirst(), 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.NoError(t, failTok(s, ctx, msgs[0].token(), 0, "dead", store.FailDead))
	}
	// Several priorities, an uneven number per shard (shard 0 has every
	// one; which the others have changes with the trial).
	for round := range 3 {
		for shard := range shards {
			for p := int64(0); p < 3; p++ {
				if (round+shard+int(p)+trial)%3 != 0 || shard == 0 {
					put(p, shard, fmt.Sprintf("p%d-s%d-r%d", p, shard, round))
				}
			}
		}
	}
	if a != "" {
		require.NoError(t, q.RequeueDead(ctx, a))
	}
	peek, err := q.Peek(ctx, MaxBatch)
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{})
	got := receiveIDs(t, ctx, q, cons, len(peek))
	receivesNothing(t, ctx, cons)
	want := infoIDs(peek)
	if !assert.Equal(t, want, got, "trial %d: Peek's order is the order one consumer receives", trial) {
		names := map[string]string{}
		for _, p := range peek {
			names[p.ID] = string(p.Payload)
		}
		var w, g []string
		for i := range want {
			w = append(w, names[want[i]])
		}
		for i := range got {
			g = append(g, names[got[i]])
		}
		t.Logf("peek: %v", w)
		t.Logf("got:  %v", g)
	}
}
