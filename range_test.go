package prioq

import (
	"context"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Range queues as earlier versions stored them, and what a Range queue of
// format 4 costs (the layout's own tests are internal/store's).

// A Range queue stored by an earlier version (meta format 2, segments of
// seq‖envelope) is served as it was by a plain Range layout: ready, delayed,
// in-flight and dead messages written in the old form come out in order,
// and new messages join them in the same form. A Range queue of format 4 is
// refused by a layout that expects the earlier format, as earlier versions
// refuse it (they compare the format exactly).
func TestRangeQueuesOfFormat2KeepWorking(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	name := queueName(t)
	// What an earlier version wrote, byte for byte: the meta record, and a
	// segment member seq‖envelope with score -priority.
	k := storeSortedMember(t, c, name)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", k.Meta(), "layout", Range(0, 9, 2).String(),
		"mode", AtLeastOnce.String(), "format", "2")))

	q, err := Open(ctx, c, name, Config{Layout: Range(0, 9, 2)})
	require.NoError(t, err)
	assert.True(t, q.layout().SeqMembers(), "found to be of format 2")
	assert.True(t, sh(q).IsRange() && !sh(q).Lists() && !sh(q).Filled(), "served as RangeSorted")
	_, err = q.Enqueue(ctx, []byte("new"), Priority(7))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("later"), Priority(7), Delay(10*time.Millisecond))
	require.NoError(t, err)
	var members []string
	require.NoError(t, c.Do(ctx, radix.Cmd(&members, "ZRANGE", k.Lanes()[1], "0", "-1")))
	require.Len(t, members, 2, "the new message joins the old one's segment, as a member")
	time.Sleep(20 * time.Millisecond)
	cons := newConsumer(t, q, ConsumerConfig{})
	var got []string
	for range 3 {
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		got = append(got, string(m.Payload))
		require.NoError(t, m.Ack(ctx))
	}
	assert.Equal(t, []string{"old", "new", "later"}, got)
	var meta string
	require.NoError(t, c.Do(ctx, radix.Cmd(&meta, "HGET", k.Meta(), "format")))
	assert.Equal(t, "2", meta, "its format is kept")

	// A new Range queue is of format 4, which the earlier format's Open
	// refuses.
	fresh := openQueue(t, c, Config{Layout: Range(0, 9, 2)})
	assert.False(t, fresh.layout().SeqMembers())
	_, err = Open(ctx, c, fresh.name, Config{Layout: seqRange(0, 9, 2)})
	assert.ErrorIs(t, err, ErrConfigMismatch)
}

// A ready Range message with a generated id is stored without Lua, as a
// Levels one is (the script cost Redis 24–45 µs a message, RPUSH 2–3).
// Failed on the code before: one EVALSHA per enqueue.
func TestRangeEnqueueRunsNoScript(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Range(-1<<40, 1<<40, 16)})
	was := commandCalls(t, c)
	for i := range 20 {
		_, err := q.Enqueue(ctx, []byte("x"), Priority(int64(i%3-1)<<30))
		require.NoError(t, err)
	}
	now := commandCalls(t, c)
	assert.Equal(t, scriptCalls(was), scriptCalls(now), "no script")
	assert.GreaterOrEqual(t, now["rpush"]-was["rpush"], 20)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(20), st.Ready)
}

// A waiting Range message costs Redis at most 100 bytes beyond its envelope
// when priorities repeat (the lists are listpacks, as a level's), counted
// with MEMORY USAGE over the queue's keys. Failed on the code before: 175
// bytes (a skiplist node, a dict entry and the sequence per message).
func TestRangeMemoryPerWaitingMessage(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 30*time.Second)
	q := openQueue(t, c, Config{Layout: Range(-1<<40, 1<<40, 16)})
	const n = 3000
	payload := make([]byte, 64)
	var envBytes int
	items := make([]EnqueueItem, 0, 100)
	for i := range n {
		items = append(items, EnqueueItem{Payload: payload, Options: []Option{Priority(int64(i%3-1) << 30)}})
		if len(items) == cap(items) {
			_, err := q.EnqueueBatch(ctx, items)
			require.NoError(t, err)
			items = items[:0]
		}
	}
	var keys []string
	s := (radix.ScannerConfig{Command: "SCAN", Pattern: "*" + q.name + "*", Count: 100000}).New(c)
	var key string
	for s.Next(ctx, &key) {
		keys = append(keys, key)
	}
	require.NoError(t, s.Close())
	var total int64
	for _, k := range keys {
		var n int64
		require.NoError(t, c.Do(ctx, radix.Cmd(&n, "MEMORY", "USAGE", k, "SAMPLES", "0")))
		total += n
	}
	msgs, err := q.Peek(ctx, 1)
	require.NoError(t, err)
	envBytes = len(msgs[0].Payload)
	per := float64(total)/n - float64(envBytes)
	t.Logf("%d keys, %d bytes: %.1f bytes per message beyond its %d-byte payload", len(keys), total, per, envBytes)
	assert.LessOrEqual(t, per, 100.0)
}

// A Range queue of the earlier form whose meta key was lost (a restart
// without persistence) is found by its segments' members when it is opened
// again with Range, and served in that form, not written over as format 4.
// Failed before this check: Open wrote format 4 and takes passed the old
// message by.
func TestRangeSortedQueueWithoutMetaIsFound(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	name := queueName(t)
	k := storeSortedMember(t, c, name)

	q, err := Open(ctx, c, name, Config{Layout: Range(0, 9, 2)})
	require.NoError(t, err)
	var format string
	require.NoError(t, c.Do(ctx, radix.Cmd(&format, "HGET", k.Meta(), "format")))
	assert.Equal(t, "2", format)
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := cons.Receive(rctx)
	require.NoError(t, err)
	assert.Equal(t, "old", string(m.Payload))
}

// storeSortedMember writes, as a version before format 4 did, one message
// "old" of priority 7 into segment 1 of Range(0, 9, 2) queue name (member
// seq‖envelope, score -7, seq counter 1), and returns the queue's keys.
func storeSortedMember(t *testing.T, c radix.Client, name string) *store.KeySet {
	t.Helper()
	k := store.KeysOf(name, 2)
	env := (&store.Envelope{ID: "@old0000000000000000001", Priority: 7, EnqueuedMs: 1, Payload: []byte("old")}).Encode()
	p := radix.NewPipeline()
	p.Append(radix.Cmd(nil, "ZADD", k.Lanes()[1], "-7", string([]byte{0, 0, 0, 0, 0, 0, 0, 1})+string(env)))
	p.Append(radix.Cmd(nil, "SET", k.Seq(), "1"))
	require.NoError(t, c.Do(context.Background(), p))
	return k
}
