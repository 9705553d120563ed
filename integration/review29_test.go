package integration

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// Tests of the review of issue 29's fixes (b779e06..0e72dd4): each one fails
// on the code it names.

// orderingKeyOf finds an OrderingKey whose messages go to shard i of q (the
// message enqueued to find it is delayed an hour: it stays in that shard).
func orderingKeyOf(t *testing.T, ctx context.Context, q *prioq.Queue, i int) string {
	t.Helper()
	for k := 0; k < 200; k++ {
		key := fmt.Sprintf("key-%d", k)
		before, err := q.Stats(ctx)
		require.NoError(t, err)
		_, err = q.Enqueue(ctx, []byte("finder"), prioq.OrderingKey(key), prioq.Delay(time.Hour))
		require.NoError(t, err)
		after, err := q.Stats(ctx)
		require.NoError(t, err)
		if after.Shards[i].Delayed > before.Shards[i].Delayed {
			return key
		}
	}
	t.Fatalf("no ordering key for shard %d", i)
	return ""
}

// A consumer of a queue of two shards, one on each primary, while shard 0's
// slot is half moved (MIGRATING on its node, IMPORTING on the other, some of
// its keys moved): shard 0 is refused (TRYAGAIN) until the move ends, and the
// consumer must go on serving shard 1 meanwhile (DESIGN.md §11: a shard that
// cannot be served is left alone while the others are).
//
// It does not: every call to shard 0 is a fenced script (or a multi-key
// blocking pop), which shard.do retries whole until its deadline
// (CallTimeout, 10 s). Shard 0's waiter fails after BlockTimeout+2 s and
// makes its hint unknown; the fetch then asks shard 0 for its best priority
// (top.lua, fenced) inside the fetch itself (fanin.go probeUnknown), and
// waits the whole CallTimeout for it; markDown leaves shard 0 alone only for
// RetryInterval (0.5 s), after which the next fetch probes it again and
// waits another 10 s. Shard 1's messages wait with it: from the first stall
// on, shard 1 is served about 0.6 s in every 10.6 s. (The same on b779e06:
// the retry until the deadline predates the fence; item 6's fix covered the
// MultiConsumer's probe only.)
func TestShardedConsumerServesOtherShardWhileOneIsHalfMoved(t *testing.T) {
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := c.client(ctx, 32)
	q, err := prioq.Open(ctx, cl, queueName(t), prioq.Config{Layout: prioq.Levels(3), Shards: 2})
	require.NoError(t, err)
	nodes := q.ShardNodes()
	require.NotEqual(t, nodes[0], nodes[1], "one shard on each primary")
	k0 := orderingKeyOf(t, ctx, q, 0) // shard 0 now holds a delayed message: keys to split
	k1 := orderingKeyOf(t, ctx, q, 1)
	for i := range 4 {
		_, err := q.Enqueue(ctx, []byte(fmt.Sprintf("s0-%d", i)), prioq.OrderingKey(k0), prioq.Delay(time.Hour))
		require.NoError(t, err)
	}

	var reported atomic.Int64
	cons, err := q.NewConsumer(prioq.ConsumerConfig{OnError: func(error) { reported.Add(1) }})
	require.NoError(t, err)
	defer closeWithin(t, cons, 20*time.Second)
	_, err = q.Enqueue(ctx, []byte("warm-up"), prioq.OrderingKey(k1))
	require.NoError(t, err)
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Ack(ctx))

	// Shard 0's slot half moved, and left so for the rest of the test.
	slot := q.ShardSlots()[0]
	from := c.byAddr(c.ownerOf(slot))
	to := c.primaries[0]
	if to == from {
		to = c.primaries[1]
	}
	mv := c.openMove(slot, to)
	var moving []string
	for _, k := range mv.keysLeft(100) {
		if strings.HasSuffix(k, ":delayed") {
			moving = append(moving, k)
		}
	}
	require.NotEmpty(t, moving)
	require.NoError(t, mv.migrate(false, moving...))
	defer mv.finish()

	// Shard 1's work, one message at a time for 15 s.
	var late []string
	worst := time.Duration(0)
	start := time.Now()
	for i := 0; time.Since(start) < 15*time.Second; i++ {
		_, err := q.Enqueue(ctx, []byte(fmt.Sprintf("s1-%d", i)), prioq.OrderingKey(k1))
		require.NoError(t, err)
		t0 := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, 12*time.Second)
		m, err := cons.Receive(rctx)
		rcancel()
		took := time.Since(t0)
		worst = max(worst, took)
		if err != nil {
			late = append(late, fmt.Sprintf("s1-%d: %v after %v", i, err, took.Round(time.Millisecond)))
			continue
		}
		if took > time.Second {
			late = append(late, fmt.Sprintf("%s received %v after its enqueue (%v into the move)", m.Payload,
				took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond)))
		}
		require.NoError(t, m.Ack(ctx))
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("worst wait for a message of shard 1: %v; background errors: %d", worst.Round(time.Millisecond), reported.Load())
	require.Empty(t, late, "shard 1's messages while shard 0's slot is half moved")
}

// A MultiConsumer serving two queues, the first in strict order holding a
// ready message when its slot is opened for a move (half its keys moved, and
// left so): the MultiConsumer must go on serving the other queue meanwhile
// (issue 29 item 6: "a probe that cannot read one queue still serves the
// others"; DESIGN.md §11).
//
// It does not: the probe that would leave the moving queue alone ('x') runs
// once per ProbeInterval, and until it does the moving queue is still marked
// ready; the fetch takes from it with take.lua (fenced), which shard.do
// retries whole until CallTimeout (10 s), inside the one fetch every Receive
// waits on (multi.go fetch). The other queue's message waits the 10 s
// (also on b779e06: item 6's fix made the probe leave the queue alone, not
// the take). (The
// wait lets the probe mark the moving queue ready before the move: its
// producer's announcement may not be sent, see shard.heard.)
func TestMultiConsumerServesOtherQueueWhileAReadyQueueIsHalfMoved(t *testing.T) {
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client(ctx, 16)
	base := queueName(t)
	moving, err := prioq.Open(ctx, cl, base+"-moving", prioq.Config{Layout: prioq.Levels(3)})
	require.NoError(t, err)
	other, err := prioq.Open(ctx, cl, base+"-other", prioq.Config{Layout: prioq.Levels(3)})
	require.NoError(t, err)
	_, err = moving.Enqueue(ctx, []byte("later"), prioq.Delay(time.Hour)) // keys to split
	require.NoError(t, err)

	mc, err := prioq.NewMultiConsumer(ctx, cl, prioq.MultiConfig{Queues: []string{moving.Name(), other.Name()},
		Consumer: prioq.ConsumerConfig{OnError: func(error) {}}})
	require.NoError(t, err)
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		require.NoError(t, mc.Close(cctx))
	}()
	// Both queues served: the first message of each goes through.
	for _, q := range []*prioq.Queue{moving, other} {
		_, err = q.Enqueue(ctx, []byte("first"))
		require.NoError(t, err)
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := mc.Receive(rctx)
		rcancel()
		require.NoError(t, err)
		require.NoError(t, m.Ack(ctx))
	}
	// The moving queue gets work (announced, or found by the next probe:
	// marked ready), then its slot is half moved.
	_, err = moving.Enqueue(ctx, []byte("stuck"))
	require.NoError(t, err)
	time.Sleep(prioq.DefaultProbeInterval + 500*time.Millisecond)
	slot := moving.ShardSlots()[0]
	from := c.byAddr(c.ownerOf(slot))
	to := c.primaries[0]
	if to == from {
		to = c.primaries[1]
	}
	mv := c.openMove(slot, to)
	var keys []string
	for _, k := range mv.keysLeft(100) {
		if strings.HasSuffix(k, ":delayed") {
			keys = append(keys, k)
		}
	}
	require.NotEmpty(t, keys)
	require.NoError(t, mv.migrate(false, keys...))
	defer mv.finish()

	// The other queue's message.
	_, err = other.Enqueue(ctx, []byte("served"))
	require.NoError(t, err)
	t0 := time.Now()
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	m, err := mc.Receive(rctx)
	rcancel()
	require.NoError(t, err, "the other queue's message, %v after its enqueue, while %s is half moved", time.Since(t0).Round(time.Millisecond), moving.Name())
	require.Equal(t, "served", string(m.Payload))
	actx, acancel := context.WithTimeout(ctx, 3*time.Second)
	require.NoError(t, m.Ack(actx))
	acancel()
}
