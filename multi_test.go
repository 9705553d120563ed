package prioq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/prioq/prioq/internal/testkit/require"
)

// openMany opens n AtLeastOnce queues named base-0 ... base-(n-1).
func openMany(t *testing.T, c Client, base string, n int, cfg Config) []*Queue {
	t.Helper()
	qs := make([]*Queue, n)
	for i := range qs {
		q, err := Open(context.Background(), c, fmt.Sprintf("%s-%d", base, i), cfg)
		require.NoError(t, err)
		qs[i] = q
	}
	return qs
}

func names(qs []*Queue) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.Name()
	}
	return out
}

func newMulti(t *testing.T, c Client, cfg MultiConfig) *MultiConsumer {
	t.Helper()
	mc, err := NewMultiConsumer(context.Background(), c, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = mc.Close(ctx)
	})
	return mc
}

// One MultiConsumer serves 300 queues from a pool of 4 connections: it
// subscribes to their 300 channels on one of them, waits in no blocking
// command, and picks up a message enqueued into any queue at once; the pool
// stays free for enqueues. (With one Consumer per queue, 300 queues needed
// 600 blocking connections.)
func TestMultiConsumerServesManyQueuesOnFewConnections(t *testing.T) {
	cl := ownPool(t, testAddr, 4)
	base := queueName(t)
	qs := openMany(t, cl, base, 300, Config{Layout: Levels(3)})
	mc := newMulti(t, cl, MultiConfig{Queues: names(qs)})
	require.Len(t, mc.Queues(), 300)

	var shardChans []string
	require.Eventually(t, func() bool {
		shardChans = nil
		return cl.Do(context.Background(), radix.Cmd(&shardChans, "PUBSUB", "SHARDCHANNELS", "prioq:{"+base+"-*")) == nil &&
			len(shardChans) == 300
	}, 5*time.Second, 20*time.Millisecond, "one subscription per queue")
	require.Zero(t, infoInt(t, cl, "clients", "blocked_clients"), "no blocking command waits")

	ctx := ctxT(t, 30*time.Second)
	rnd := newRand(t)
	for i := range 50 {
		q := qs[rnd.IntN(len(qs))]
		start := time.Now()
		_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(int64(rnd.IntN(3))))
		require.NoError(t, err)
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, q.Name(), m.Queue())
		require.Equal(t, fmt.Sprint(i), string(m.Payload))
		require.Less(t, time.Since(start), time.Second, "picked up from its announcement, not a probe")
		require.NoError(t, m.Ack(ctx))
	}
}

// Without Weights, queues are served in the order given, whatever the
// priorities; within a queue, its priorities rule.
func TestMultiConsumerStrictOrder(t *testing.T) {
	cl := newClient(t)
	qs := openMany(t, cl, queueName(t), 3, Config{Layout: Levels(3)})
	ctx := ctxT(t, 10*time.Second)
	for i := 2; i >= 0; i-- {
		for p := range 3 {
			_, err := qs[i].Enqueue(ctx, []byte(fmt.Sprintf("%d/%d", i, p)), Priority(int64(p)))
			require.NoError(t, err)
		}
	}
	mc := newMulti(t, cl, MultiConfig{Queues: names(qs)})
	var got []string
	for range 9 {
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		got = append(got, string(m.Payload))
		require.NoError(t, m.Ack(ctx))
	}
	require.Equal(t, []string{"0/2", "0/1", "0/0", "1/2", "1/1", "1/0", "2/2", "2/1", "2/0"}, got)
}

// With Weights, the queues with work share the takes by weight.
func TestMultiConsumerWeights(t *testing.T) {
	cl := newClient(t)
	qs := openMany(t, cl, queueName(t), 2, Config{})
	ctx := ctxT(t, 20*time.Second)
	for _, q := range qs {
		items := make([]EnqueueItem, 400)
		for i := range items {
			items[i] = EnqueueItem{Payload: []byte("x")}
		}
		_, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
	}
	mc := newMulti(t, cl, MultiConfig{Queues: names(qs), Weights: map[string]int{qs[0].Name(): 3, qs[1].Name(): 1}})
	count := map[string]int{}
	for range 200 {
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		count[m.Queue()]++
		require.NoError(t, m.Ack(ctx))
	}
	// Expected 150 / 50; the bounds are ~5 standard deviations wide.
	require.True(t, count[qs[0].Name()] >= 119 && count[qs[0].Name()] <= 181, "counts %v", count)
}

// An announcement that never comes (here: the wake-up member was already
// set, so the enqueue announced nothing) costs a probe's delay, not the
// message.
func TestMultiConsumerFindsWorkWithoutAnnouncement(t *testing.T) {
	cl := newClient(t)
	qs := openMany(t, cl, queueName(t), 2, Config{})
	mc := newMulti(t, cl, MultiConfig{Queues: names(qs), ProbeInterval: 200 * time.Millisecond,
		Consumer: ConsumerConfig{RetryInterval: 3 * time.Second}})
	ctx := ctxT(t, 10*time.Second)
	m, err := mc.ReceiveBatch(ctxT(t, 300*time.Millisecond), 1) // all drained and waiting
	require.ErrorIs(t, err, context.DeadlineExceeded, "nothing yet: %v", m)
	// The listener's connection dies (it reconnects after RetryInterval, 3 s):
	// the announcement of the next enqueue reaches nobody.
	var killed int
	require.NoError(t, cl.Do(ctx, radix.Cmd(&killed, "CLIENT", "KILL", "TYPE", "pubsub")))
	require.Equal(t, 1, killed)
	_, err = qs[1].Enqueue(ctx, []byte("quiet"))
	require.NoError(t, err)
	start := time.Now()
	got, err := mc.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "quiet", string(got.Payload))
	require.Less(t, time.Since(start), 2*time.Second, "found by the probe, before the listener is back")
	t.Logf("found by the probe after %v", time.Since(start))

	// Work with no wake-up at all (here: the queue was resumed by deleting
	// its paused key, as an earlier version did, after a take claimed the
	// wake-up and found the queue paused): the probe reads the lanes too.
	require.NoError(t, qs[0].Pause(ctx))
	received := make(chan *Message, 1)
	go func() {
		m, err := mc.Receive(ctx)
		if err == nil {
			received <- m
		}
	}()
	_, err = qs[0].Enqueue(ctx, []byte("paused"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return cl.Do(ctx, radix.Cmd(&n, "EXISTS", sh(qs[0]).Keys().Wake())) == nil && n == 0
	}, 5*time.Second, 10*time.Millisecond, "a take found it paused and claimed the wake-up")
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "DEL", sh(qs[0]).Keys().Paused())))
	select {
	case got = <-received:
		require.Equal(t, "paused", string(got.Payload))
	case <-ctx.Done():
		t.Fatal("work without a wake-up was never found")
	}
}

// Delayed messages are promoted when due, and expired leases come back, with
// no consumer of their queue but the MultiConsumer.
func TestMultiConsumerPromotesAndSweeps(t *testing.T) {
	cl := newClient(t)
	qs := openMany(t, cl, queueName(t), 3, Config{})
	mc := newMulti(t, cl, MultiConfig{Queues: names(qs), ProbeInterval: 100 * time.Millisecond,
		Consumer: ConsumerConfig{Lease: 300 * time.Millisecond}})
	ctx := ctxT(t, 10*time.Second)
	start := time.Now()
	_, err := qs[2].Enqueue(ctx, []byte("later"), Delay(400*time.Millisecond))
	require.NoError(t, err)
	m, err := mc.Receive(ctx)
	require.NoError(t, err)
	waited := time.Since(start)
	require.Equal(t, "later", string(m.Payload))
	require.GreaterOrEqual(t, waited, 390*time.Millisecond, "not early")
	require.Less(t, waited, 2*time.Second, "promoted when due")
	// Not acked: the lease ends, and the message comes back.
	again, err := mc.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, m.ID, again.ID)
	require.Equal(t, 2, again.Attempts)
	require.NoError(t, again.Ack(ctx))
}

// Queues matching Pattern are served, also those created while it runs;
// Remove stops serving one; Run handles messages of every queue.
func TestMultiConsumerPatternAddRemoveRun(t *testing.T) {
	cl := newClient(t)
	base := queueName(t)
	qs := openMany(t, cl, base, 2, Config{})
	other := openQueue(t, cl, Config{}) // does not match
	mc := newMulti(t, cl, MultiConfig{Pattern: base + "-*", RescanInterval: 100 * time.Millisecond})
	require.Equal(t, names(qs), mc.Queues())

	late, err := Open(context.Background(), cl, base+"-late", Config{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(mc.Queues()) == 3 }, 5*time.Second, 20*time.Millisecond)

	mc.Remove(qs[0].Name())
	ctx := ctxT(t, 10*time.Second)
	for _, q := range []*Queue{qs[0], qs[1], late, other} {
		_, err := q.Enqueue(ctx, []byte(q.Name()))
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- mc.Run(rctx, func(_ context.Context, m *Message) error {
			mu.Lock()
			seen[m.Queue()] = true
			mu.Unlock()
			return nil
		})
	}()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen[qs[1].Name()] && seen[late.Name()]
	}, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	cancel()
	<-done
	require.False(t, seen[qs[0].Name()], "removed")
	require.False(t, seen[other.Name()], "not matched")
	for _, q := range []*Queue{qs[0], other} {
		n, err := q.Len(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "still waiting in %s", q.Name())
	}
}

// Bad configurations are refused with the exported errors, before anything
// starts.
func TestMultiConsumerRefusesBadConfig(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 5*time.Second)
	_, err := NewMultiConsumer(ctx, cl, MultiConfig{})
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = NewMultiConsumer(ctx, cl, MultiConfig{Pattern: "[a"})
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = NewMultiConsumer(ctx, cl, MultiConfig{Queues: []string{queueName(t) + "-none"}})
	require.ErrorIs(t, err, ErrNotFound)
	amo := openQueue(t, cl, Config{Mode: AtMostOnce})
	_, err = NewMultiConsumer(ctx, cl, MultiConfig{Queues: []string{amo.Name()}})
	require.ErrorIs(t, err, ErrWrongMode)
	_, err = NewMultiConsumer(ctx, cl, MultiConfig{Queues: []string{"x"}, ProbeInterval: time.Nanosecond})
	require.ErrorIs(t, err, ErrInvalidOption)
}

// Removing every queue releases the listener's connection; adding one back
// subscribes again and serves it.
func TestMultiConsumerRemoveAllThenAdd(t *testing.T) {
	cl := newClient(t)
	base := queueName(t)
	qs := openMany(t, cl, base, 2, Config{})
	mc := newMulti(t, cl, MultiConfig{Queues: names(qs)})
	channels := func() int {
		var chans []string
		require.NoError(t, cl.Do(context.Background(), radix.Cmd(&chans, "PUBSUB", "SHARDCHANNELS", "prioq:{"+base+"-*")))
		return len(chans)
	}
	require.Eventually(t, func() bool { return channels() == 2 }, 5*time.Second, 10*time.Millisecond)
	mc.Remove(qs[0].Name())
	mc.Remove(qs[1].Name())
	require.Eventually(t, func() bool { return channels() == 0 }, 5*time.Second, 10*time.Millisecond)
	ctx := ctxT(t, 10*time.Second)
	require.NoError(t, mc.Add(ctx, qs[1].Name()))
	require.Eventually(t, func() bool { return channels() == 1 }, 5*time.Second, 10*time.Millisecond)
	_, err := qs[1].Enqueue(ctx, []byte("back"))
	require.NoError(t, err)
	m, err := mc.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "back", string(m.Payload))
}

// A queue nobody listens to pays for announcements once a second, not once
// per enqueue: 200 enqueues, each taken at once by a waiting consumer (so
// each sets the wake-up anew), send at most one SPUBLISH a second. (The
// first version sent one per enqueue, in a round trip of its own: single
// calls lost a fifth of their throughput.)
func TestUnheardQueueAnnouncesOnceASecond(t *testing.T) {
	cl := newClient(t)
	q := openQueue(t, cl, Config{})
	c := newConsumer(t, q, ConsumerConfig{})
	ctx := ctxT(t, 20*time.Second)
	handled := make(chan struct{})
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = c.Run(rctx, func(context.Context, *Message) error { handled <- struct{}{}; return nil }) }()
	before := commandCalls(t, cl)["spublish"]
	start := time.Now()
	for i := range 200 {
		time.Sleep(2 * time.Millisecond) // the consumer waits on the wake-up again
		_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)))
		require.NoError(t, err)
		select {
		case <-handled:
		case <-ctx.Done():
			t.Fatal("not handled")
		}
	}
	sent := commandCalls(t, cl)["spublish"] - before
	limit := 2 + int(time.Since(start)/time.Second)
	t.Logf("%d SPUBLISH for 200 enqueues in %v", sent, time.Since(start))
	require.True(t, sent <= limit, "%d SPUBLISH for 200 enqueues in %v (at most %d)", sent, time.Since(start), limit)
}

func evalshaCalls(t *testing.T, cl radix.Client) int {
	var cs string
	require.NoError(t, cl.Do(context.Background(), radix.Cmd(&cs, "INFO", "commandstats")))
	for _, l := range strings.Split(cs, "\n") {
		if strings.HasPrefix(l, "cmdstat_evalsha:calls=") {
			v := strings.TrimPrefix(l, "cmdstat_evalsha:calls=")
			n, _ := strconv.Atoi(v[:strings.IndexByte(v, ',')])
			return n
		}
	}
	return 0
}

// A paused queue that producers keep writing to announces every write; a
// MultiConsumer takes from it at most once a ProbeInterval until it is
// resumed. Before (found in review), each announcement cost a take that
// answered "paused": 14,433 scripts in a 2 s Receive.
func TestMultiConsumerLeavesAPausedQueueAlone(t *testing.T) {
	cl := ownPool(t, testAddr, 16) // its own server-wide counters are still shared: run alone
	qs := openMany(t, cl, queueName(t), 2, Config{})
	paused := qs[0]
	ctx := ctxT(t, 30*time.Second)
	require.NoError(t, paused.Pause(ctx))
	mc := newMulti(t, cl, MultiConfig{Queues: names(qs)})
	time.Sleep(300 * time.Millisecond)
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pctx.Err() == nil {
				_, _ = paused.Enqueue(pctx, []byte("p")) // plain enqueues: no script
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()
	time.Sleep(100 * time.Millisecond)
	before := evalshaCalls(t, cl)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := mc.Receive(rctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	takes := evalshaCalls(t, cl) - before
	require.Less(t, takes, 100, "scripts run during a 2 s Receive with only a paused queue having writes")
	require.NoError(t, paused.Resume(ctx))
	m, err := mc.Receive(ctx)
	require.NoError(t, err, "served again once resumed")
	require.Equal(t, paused.Name(), m.Queue())
}

// A removed queue is no longer promoted. Before (found in review; 1 run in 6),
// a promotion running when Remove stopped the queue's timer set the next
// one afterwards, and the queue went on being promoted until Close.
func TestMultiConsumerStopsPromotingARemovedQueue(t *testing.T) {
	cl := newClient(t)
	qs := openMany(t, cl, queueName(t), 30, Config{})
	ctx := ctxT(t, 60*time.Second)
	start := time.Now()
	for _, q := range qs {
		items := make([]EnqueueItem, 400)
		for i := range items {
			items[i] = EnqueueItem{Payload: []byte("d"), Options: []Option{At(start.Add(500*time.Millisecond + time.Duration(i)*5*time.Millisecond))}}
		}
		_, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
	}
	mc := newMulti(t, cl, MultiConfig{Queues: names(qs), ProbeInterval: time.Minute})
	time.Sleep(time.Until(start.Add(time.Second)))
	for _, q := range qs {
		mc.Remove(q.Name())
	}
	time.Sleep(50 * time.Millisecond)
	var before []int
	for _, q := range qs {
		var n int
		require.NoError(t, cl.Do(ctx, radix.Cmd(&n, "ZCARD", sh(q).Keys().Delayed())))
		before = append(before, n)
	}
	time.Sleep(500 * time.Millisecond)
	still := 0
	for i, q := range qs {
		var n int
		require.NoError(t, cl.Do(ctx, radix.Cmd(&n, "ZCARD", sh(q).Keys().Delayed())))
		if n < before[i] {
			still++
		}
	}
	require.Zero(t, still, "queues still promoted by the MultiConsumer after Remove")
}
