package prioq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// A queue of several shards on one Redis: every shard is a hash tag of its
// own, so the same code runs on a cluster (integration/ covers that).

// shardCounts is how many messages (ready, delayed, in flight, dead) each
// shard holds.
func shardCounts(t *testing.T, q *Queue) []int64 {
	t.Helper()
	st, err := q.Stats(context.Background())
	require.NoError(t, err)
	require.Len(t, st.Shards, len(q.shards))
	out := make([]int64, len(st.Shards))
	for i, s := range st.Shards {
		out[i] = s.Ready + s.Delayed + s.InFlight + s.Dead
	}
	return out
}

// Every queue operation works on the whole queue, and each message stays in
// its shard: generated ids say theirs, caller ids and ordering keys hash.
func TestShardedQueueOperations(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout, Shards: 4})
			rng := newRand(t)
			prio := priorityGen(rng, l.layout)
			var ids []string
			for i := range 200 {
				var opts []Option
				switch i % 4 {
				case 1:
					opts = append(opts, ID(fmt.Sprintf("job-%d", i)))
				case 2:
					opts = append(opts, OrderingKey(fmt.Sprintf("tenant-%d", i%7)))
				}
				id, err := q.Enqueue(ctx, []byte("m"), append(opts, Priority(prio()))...)
				require.NoError(t, err)
				ids = append(ids, id)
			}
			for _, n := range shardCounts(t, q) {
				assert.Greater(t, n, int64(20), "every shard gets a share")
			}
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(200), st.Ready)
			var sum int64
			for _, n := range st.Lanes {
				sum += n
			}
			assert.Equal(t, int64(200), sum)

			peek, err := q.Peek(ctx, 200)
			require.NoError(t, err)
			require.Len(t, peek, 200)
			for i := 1; i < len(peek); i++ {
				require.GreaterOrEqual(t, peek[i-1].Priority, peek[i].Priority, "Peek merges the shards in priority order")
			}

			// Cancel finds a generated id, a caller id and one placed by an ordering key.
			for _, id := range []string{ids[0], ids[1], ids[2]} {
				require.NoError(t, q.Cancel(ctx, id), id)
				assert.ErrorIs(t, q.Cancel(ctx, id), ErrNotFound, id)
			}
			_, err = q.Enqueue(ctx, []byte("again"), ID("job-5"))
			assert.ErrorIs(t, err, ErrDuplicate, "caller ids are idempotent queue-wide")
			_, err = q.Enqueue(ctx, []byte("again"), ID("job-1"))
			assert.NoError(t, err, "a cancelled caller id is free")

			// Dead letters across shards: listed, paged, requeued by id, purged.
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			msgs, err := cons.ReceiveBatch(ctx, 12)
			require.NoError(t, err)
			require.Len(t, msgs, 12)
			for _, m := range msgs {
				require.NoError(t, m.fail(ctx, 0, "dead", store.FailDead))
			}
			dead, err := q.DeadLetters(ctx, 0, 100)
			require.NoError(t, err)
			require.Len(t, dead, 12)
			page, err := q.DeadLetters(ctx, 5, 4)
			require.NoError(t, err)
			assert.Equal(t, dead[5:9], page)
			require.NoError(t, q.RequeueDead(ctx, msgs[0].ID))
			n, err := q.PurgeDead(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(11), n)

			require.NoError(t, q.Pause(ctx))
			st, err = q.Stats(ctx)
			require.NoError(t, err)
			assert.True(t, st.Paused)
			require.NoError(t, q.Resume(ctx))
			n, err = q.Purge(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(200-3+1-12+1), n, "every waiting message of every shard")
		})
	}
}

// One consumer draining a preloaded queue of several shards gets its
// messages in strict priority order: 0 inversions, in batches too.
func TestShardedSingleConsumerStrictOrder(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		for _, l := range someLayouts {
			for _, batch := range []int{1, 7} {
				t.Run(fmt.Sprintf("%s/%s/batch%d", m.name, l.name, batch), func(t *testing.T) {
					ctx := ctxT(t, 30*time.Second)
					q := openQueue(t, c, Config{Layout: l.layout, Mode: m.mode, Shards: 5})
					prio := priorityGen(newRand(t), l.layout)
					items := make([]EnqueueItem, 600)
					for i := range items {
						items[i] = EnqueueItem{Payload: []byte("x"), Options: []Option{Priority(prio())}}
					}
					_, err := q.EnqueueBatch(ctx, items)
					require.NoError(t, err)
					cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
					last, got := int64(1<<62), 0
					for got < len(items) {
						msgs, err := cons.ReceiveBatch(ctx, batch)
						require.NoError(t, err)
						for _, msg := range msgs {
							require.LessOrEqual(t, msg.Priority, last, "delivery %d: an inversion", got)
							last = msg.Priority
							got++
						}
						if m.mode == AtLeastOnce {
							for _, err := range AckBatch(ctx, msgs...) {
								require.NoError(t, err)
							}
						}
					}
				})
			}
		}
	}
}

// An idle consumer of several shards picks up a message at once, whatever
// shard it lands on, and holds one blocking connection per shard (its
// promoters do not block: the shard's wait wakes them).
func TestShardedIdlePickupAndConnections(t *testing.T) {
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			cl := ownPool(t, ownServer(t), 16)
			q := openQueue(t, cl, Config{Mode: m.mode, Shards: 4})
			cons := newConsumer(t, q, ConsumerConfig{BlockTimeout: 5 * time.Second})
			require.Eventually(t, func() bool { return infoInt(t, cl, "clients", "blocked_clients") == 4 },
				5*time.Second, 10*time.Millisecond, "one blocking wait per shard")
			time.Sleep(100 * time.Millisecond)
			assert.Equal(t, 4, infoInt(t, cl, "clients", "blocked_clients"), "and no more")
			for key := range 12 { // ordering keys land on every shard
				got := make(chan *Message, 1)
				go func() {
					msg, _ := cons.Receive(ctx)
					got <- msg
				}()
				time.Sleep(20 * time.Millisecond)
				start := time.Now()
				id, err := q.Enqueue(ctx, []byte("x"), OrderingKey(fmt.Sprint(key)))
				require.NoError(t, err)
				msg := <-got
				require.True(t, msg != nil)
				assert.Equal(t, id, msg.ID)
				assert.Less(t, time.Since(start), 500*time.Millisecond, "picked up at once (shard %d)", q.shardOf(id))
				if m.mode == AtLeastOnce {
					require.NoError(t, msg.Ack(ctx))
				}
			}
		})
	}
}

// An idle consumer of several shards costs Redis at most one command per
// second per shard (the budget), scripts' inner commands counted:
// each shard's wait, sweep and promoter re-read, nothing more.
func TestShardedIdleLoad(t *testing.T) {
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			const shards, window = 4, 6 * time.Second
			// The idle loop alone: a consumer's history reading, once a
			// minute a Stats of the whole queue (about 14 commands a
			// shard) when no other consumer took that minute, is out of
			// the window (TestConsumersRecordHistory tests it; the
			// operating page says its cost). A window that crossed a
			// minute counted it: 69 commands instead of about 13.
			historyEvery.Store(int64(24 * time.Hour))
			t.Cleanup(func() { historyEvery.Store(0) })
			cl := ownPool(t, ownServer(t), 16)
			q := openQueue(t, cl, Config{Mode: m.mode, Shards: shards})
			newConsumer(t, q, ConsumerConfig{})
			time.Sleep(time.Second) // past the start: probes, first waits
			before := infoInt(t, cl, "stats", "total_commands_processed")
			time.Sleep(window)
			n := infoInt(t, cl, "stats", "total_commands_processed") - before - 1 // the INFO itself
			perShard := float64(n) / shards / window.Seconds()
			t.Logf("%s: %d commands in %v: %.2f per shard per second", m.name, n, window, perShard)
			assert.LessOrEqual(t, perShard, 1.0)
		})
	}
}

// Delays, retries, expired leases and dead letters stay in their shard, and
// a promoter of every shard runs.
func TestShardedDelaysRetriesAndLeases(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	q := openQueue(t, newClient(t), Config{Shards: 3, Backoff: func(int) time.Duration { return 50 * time.Millisecond }})
	var want []string
	for i := range 9 {
		id, err := q.Enqueue(ctx, []byte("later"), Delay(time.Duration(100+20*i)*time.Millisecond))
		require.NoError(t, err)
		want = append(want, id)
	}
	cons := newConsumer(t, q, ConsumerConfig{Lease: 200 * time.Millisecond, SweepInterval: 50 * time.Millisecond})
	seen := map[string]int{}
	for len(seen) < len(want) || seen[want[0]] < 3 {
		msg, err := cons.Receive(ctx)
		require.NoError(t, err)
		seen[msg.ID]++
		shard := q.shardOf(msg.ID)
		assert.Equal(t, msg.shard(), q.shards[shard], "delivered from its shard")
		switch {
		case msg.ID == want[0] && seen[msg.ID] == 1:
			require.NoError(t, msg.Retry(ctx, 0, "again")) // a retry, delayed by the backoff
		case msg.ID == want[0] && seen[msg.ID] == 2:
			// lease left to expire: the sweep redelivers it
		default:
			require.NoError(t, msg.Ack(ctx))
		}
	}
	assert.Equal(t, 3, seen[want[0]])
	counts := shardCounts(t, q)
	assert.Equal(t, []int64{0, 0, 0}, counts)
}

// Several consumers of a queue of several shards: each message is handled
// exactly once.
func TestShardedConsumersExactlyOnce(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			const total = 3000
			ctx := ctxT(t, time.Minute)
			q := openQueue(t, c, Config{Mode: m.mode, Shards: 4, Layout: Levels(5)})
			var mu sync.Mutex
			seen := map[string]int{}
			done := make(chan struct{})
			var wg sync.WaitGroup
			for range 3 {
				cons := newConsumer(t, q, ConsumerConfig{Concurrency: 8})
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = cons.Run(ctx, func(_ context.Context, msg *Message) error {
						mu.Lock()
						defer mu.Unlock()
						seen[msg.ID]++
						if len(seen) == total {
							select {
							case <-done:
							default:
								close(done)
							}
						}
						return nil
					})
				}()
			}
			prio := priorityGen(newRand(t), q.cfg.Layout)
			for i := 0; i < total; i += 100 {
				items := make([]EnqueueItem, 100)
				for j := range items {
					items[j] = EnqueueItem{Payload: []byte("x"), Options: []Option{Priority(prio())}}
				}
				_, err := q.EnqueueBatch(ctx, items)
				require.NoError(t, err)
			}
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatalf("handled %d of %d", len(seen), total)
			}
			mu.Lock()
			defer mu.Unlock()
			for id, n := range seen {
				require.Equal(t, 1, n, id)
			}
		})
	}
}

// The shard count is stored: opening with another is a mismatch, OpenExisting
// reads it; a queue of one shard stores no count (and format 2), as before.
func TestShardsAreStored(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{Shards: 4})
	_, err := Open(ctx, c, q.Name(), Config{Shards: 2})
	assert.ErrorIs(t, err, ErrConfigMismatch)
	_, err = Open(ctx, c, q.Name(), Config{})
	assert.ErrorIs(t, err, ErrConfigMismatch)
	again, err := OpenExisting(ctx, c, q.Name(), Config{})
	require.NoError(t, err)
	assert.Equal(t, 4, len(again.shards))
	var meta map[string]string
	require.NoError(t, c.Do(ctx, radix.Cmd(&meta, "HGETALL", sh(q).Keys().Meta())))
	assert.Equal(t, map[string]string{"layout": "levels:3", "mode": "at-least-once", "format": "3", "shards": "4"}, meta)

	one := openQueue(t, c, Config{})
	require.NoError(t, c.Do(ctx, radix.Cmd(&meta, "HGETALL", sh(one).Keys().Meta())))
	assert.Equal(t, map[string]string{"layout": "levels:3", "mode": "at-least-once", "format": "2"}, meta)
	_, err = Open(ctx, c, one.Name(), Config{Shards: 3})
	assert.ErrorIs(t, err, ErrConfigMismatch)

	_, err = Open(ctx, c, queueName(t), Config{Shards: MaxShards + 1})
	assert.ErrorIs(t, err, ErrInvalidOption)
	_, err = q.NewConsumer(ConsumerConfig{Weights: []int{1, 1, 1}})
	assert.ErrorIs(t, err, ErrInvalidOption, "Weights need one shard")
}

// A batch over several shards is atomic per shard: a shard whose part fails
// (its ids key of the wrong type) stores none of its items, which carry the
// error; the other shards store theirs.
func TestShardedBatchFailsPerShard(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(2), Shards: 3})
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", q.shards[1].Keys().IDs(), "not a set")))
	items := make([]EnqueueItem, 30)
	for i := range items {
		items[i] = EnqueueItem{Payload: []byte("x"), Options: []Option{ID(fmt.Sprintf("b-%d", i))}}
	}
	res, err := q.EnqueueBatch(ctx, items)
	require.Error(t, err)
	require.Len(t, res, len(items))
	want := make([]int64, 3)
	for i, r := range res {
		id := fmt.Sprintf("b-%d", i)
		assert.Equal(t, id, r.ID)
		if q.hashShard(id) == 1 {
			assert.Error(t, r.Err, "item %d is in the failed part", i)
			continue
		}
		assert.NoError(t, r.Err, "item %d", i)
		want[q.hashShard(id)]++
	}
	require.Greater(t, want[0]+want[2], int64(0))
	require.Less(t, want[0]+want[2], int64(30), "some items fell on shard 1")
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", q.shards[1].Keys().IDs())))
	assert.Equal(t, want, shardCounts(t, q), "the failed part stored nothing, the others all")
}

// A consumer that is open but not fetching (Run with every worker busy, or
// between Receives) does not keep a shard's wake-up from an idle consumer:
// its waiter learns from it and gives it back. (Found by a review: the idle
// consumer waited 9.3 s, AtLeastOnce, or 4.9 s, AtMostOnce.)
func TestBusyConsumerDoesNotKeepTheWakeUp(t *testing.T) {
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			cl := ownPool(t, ownServer(t), 16)
			q := openQueue(t, cl, Config{Mode: m.mode, Shards: 2})
			newConsumer(t, q, ConsumerConfig{BlockTimeout: 5 * time.Second}) // not receiving
			time.Sleep(200 * time.Millisecond)                               // its waiters block first
			idle := newConsumer(t, q, ConsumerConfig{BlockTimeout: 5 * time.Second})
			ctx := ctxT(t, 3*time.Second)
			got := make(chan error, 1)
			go func() {
				_, err := idle.Receive(ctx)
				got <- err
			}()
			time.Sleep(200 * time.Millisecond) // the idle one probed: both shards empty
			start := time.Now()
			_, err := q.Enqueue(context.Background(), []byte("x"))
			require.NoError(t, err)
			require.NoError(t, <-got, "the idle consumer got the message")
			t.Logf("picked up after %v", time.Since(start))
			assert.Less(t, time.Since(start), time.Second)
		})
	}
}

// downShard fails every call on shard 1's keys, as a primary that is down
// (failing over, or lost) would.
type downShard struct{ c radix.Client }

func (d downShard) Do(ctx context.Context, a radix.Action) error {
	for _, k := range a.Properties().Keys {
		if strings.HasPrefix(k, "prioq/1:") {
			return errors.New("dial tcp: connection refused (shard 1's primary is down)")
		}
	}
	return d.c.Do(ctx, a)
}

// A shard that cannot be reached is reported and left alone, and the others
// are served: before, every fetch failed while one shard's probe did.
// (Found by a review.) When every shard is down, Receive fails.
func TestOneShardDownTheOthersAreServed(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	good := openQueue(t, newClient(t), Config{Shards: 2})
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("k", i); good.hashShard(k) == 0 {
			key = k
		}
	}
	id, err := good.Enqueue(ctx, []byte("x"), OrderingKey(key))
	require.NoError(t, err)
	bad := newQueue(downShard{newClient(t)}, good.name, good.cfg)
	var mu sync.Mutex
	var reported []error
	c, err := bad.NewConsumer(ConsumerConfig{RetryInterval: 100 * time.Millisecond, OnError: func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}})
	require.NoError(t, err)
	defer c.Close(context.Background())
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := c.Receive(rctx)
	require.NoError(t, err, "served from the healthy shard")
	assert.Equal(t, id, m.ID)
	require.NoError(t, m.Ack(ctx))
	mu.Lock()
	assert.NotEmpty(t, reported, "the down shard is reported")
	mu.Unlock()

	allDown := newQueue(downAll{}, good.name, good.cfg)
	c2, err := allDown.NewConsumer(ConsumerConfig{RetryInterval: 100 * time.Millisecond, OnError: func(error) {}})
	require.NoError(t, err)
	defer c2.Close(context.Background())
	_, err = c2.Receive(rctx)
	assert.ErrorContains(t, err, "every shard is down")
}

// downAll fails every call.
type downAll struct{}

func (downAll) Do(context.Context, radix.Action) error {
	return errors.New("dial tcp: connection refused (every shard is down)")
}

// A consumer that does not promote leaves a shard's "earlier due time"
// signal to the consumers that do: before, its waiter popped it from the
// wake-up set and dropped it, and the promoter slept until its old head's
// due time (20 s here). (Found by a review.)
func TestNoPromoterConsumerLeavesTheDueSignal(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	cl := ownPool(t, ownServer(t), 16)
	q := openQueue(t, cl, Config{Shards: 2})
	_, err := q.Enqueue(ctx, []byte("late"), Delay(20*time.Second), OrderingKey("k"))
	require.NoError(t, err)
	newConsumer(t, q, ConsumerConfig{NoPromoter: true}) // its waiters block first
	time.Sleep(200 * time.Millisecond)
	newConsumer(t, q, ConsumerConfig{}) // the one that promotes
	time.Sleep(500 * time.Millisecond)  // its promoter read the 20 s head and sleeps
	_, err = q.Enqueue(ctx, []byte("soon"), Delay(100*time.Millisecond), OrderingKey("k"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		return st.Ready+st.InFlight > 0
	}, 2*time.Second, 20*time.Millisecond, "the message due in 100 ms was promoted")
}

// An AtMostOnce consumer of a sharded queue that gives back what it holds
// (Close) sets the shard's wake-up, so an idle consumer that found the
// shards empty takes it at once, not after its wait times out. (Found by a
// review.)
func TestShardedGiveBackWakesAnIdleConsumer(t *testing.T) {
	cl := ownPool(t, ownServer(t), 16)
	q := openQueue(t, cl, Config{Mode: AtMostOnce, Shards: 2})
	a, err := q.NewConsumer(ConsumerConfig{NoPromoter: true, BlockTimeout: 5 * time.Second})
	require.NoError(t, err)
	id := holdOne(t, q, a)
	b := newConsumer(t, q, ConsumerConfig{NoPromoter: true, BlockTimeout: 5 * time.Second})
	ctx := ctxT(t, 10*time.Second)
	got := make(chan *Message, 1)
	go func() {
		m, _ := b.Receive(ctx)
		got <- m
	}()
	time.Sleep(200 * time.Millisecond) // b probed: both shards empty
	start := time.Now()
	require.NoError(t, a.Close(ctx))
	m := <-got
	require.True(t, m != nil)
	assert.Equal(t, id, m.ID)
	t.Logf("taken %v after the give-back", time.Since(start))
	assert.Less(t, time.Since(start), time.Second)
}

// A shard's sched key is a sorted set: every script that meets it takes it
// as one (a purge failed with WRONGTYPE once a delayed message had been
// scheduled, found by the cluster suite).
func TestShardedSchedIsASortedSet(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{Shards: 2, MaxAttempts: 3})
	for i := range 6 {
		_, err := q.Enqueue(ctx, []byte("later"), Delay(time.Hour), OrderingKey(fmt.Sprint(i)))
		require.NoError(t, err)
	}
	for _, s := range q.shards {
		var typ string
		require.NoError(t, c.Do(ctx, radix.Cmd(&typ, "TYPE", s.Keys().Sched())))
		assert.Equal(t, "zset", typ)
	}
	// A retry with a delay schedules in the sched set too (fail.lua).
	_, err := q.Enqueue(ctx, []byte("now"))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Retry(ctx, time.Minute, "later"))
	n, err := q.Purge(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(7), n)
}

// shardKey returns an ordering key that routes to shard i of q.
func shardKey(q *Queue, i int) string {
	for k := 0; ; k++ {
		if key := fmt.Sprint("k", k); q.hashShard(key) == i {
			return key
		}
	}
}

// Issue 29, item 7: a sharded queue's delayed message is promoted on time
// while its consumer is busy. Shards 2; five priority-0 messages in shard 0;
// the consumer holds one from Receive; a priority-2 message with Delay(50ms)
// into that shard. Before, it stayed delayed for PromoteWait (29.9 s): the
// consumer's one wait on the shard, BZPOPMIN wake sched, always popped the
// wake-up first (set while work is ready) and gave it back, and never read
// the sched set. The MultiConsumer, which learns due times from its probe and
// the shard channel, is held to the same bound.
func TestShardedDelayedIsPromotedWhileTheConsumerIsBusy(t *testing.T) {
	for _, multi := range []bool{false, true} {
		name := "Consumer"
		if multi {
			name = "MultiConsumer"
		}
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			cl := newClient(t)
			q := openQueue(t, cl, Config{Layout: Levels(3), Shards: 2})
			key := shardKey(q, 0)
			for range 5 {
				_, err := q.Enqueue(ctx, []byte("p0"), Priority(0), OrderingKey(key))
				require.NoError(t, err)
			}
			var cons *Consumer
			if multi {
				cons = newMulti(t, cl, MultiConfig{Queues: []string{q.Name()}}).Consumer
			} else {
				cons = newConsumer(t, q, ConsumerConfig{})
			}
			held, err := cons.Receive(ctx) // and kept: the consumer is busy
			require.NoError(t, err)
			require.Equal(t, int64(0), held.Priority)
			time.Sleep(200 * time.Millisecond) // its waiter learnt of the 4 left, gave the wake-up back
			start := time.Now()
			id, err := q.Enqueue(ctx, []byte("p2"), Priority(2), Delay(50*time.Millisecond), OrderingKey(key))
			require.NoError(t, err)
			var promoted time.Duration
			for promoted == 0 {
				st, err := q.Stats(ctx)
				require.NoError(t, err)
				switch {
				case st.Delayed == 0:
					promoted = time.Since(start)
				case time.Since(start) > 3*time.Second:
					t.Fatalf("the message due in 50 ms is still delayed after %v", time.Since(start))
				default:
					time.Sleep(5 * time.Millisecond)
				}
			}
			t.Logf("promoted %v after its enqueue (due after 50 ms)", promoted)
			assert.Less(t, promoted, time.Second)
			m, err := cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, id, m.ID, "the next Receive gets the priority-2 message")
		})
	}
}

// A parked waiter (its consumer busy, work left in its shard, the wake-up
// given back) watches the sched set and its poke key; when its consumer
// begins a fetch, the poke brings it back to the wake-up at once, so work
// that comes after the consumer drained the shard is picked up in
// milliseconds, not at the parked wait's timeout (BlockTimeout, 5 s here).
func TestParkedWaiterWatchesTheWakeUpOnceItsConsumerFetches(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	cl := newClient(t)
	q := openQueue(t, cl, Config{Layout: Levels(3), Shards: 2})
	key := shardKey(q, 0)
	for range 3 {
		_, err := q.Enqueue(ctx, []byte("first"), OrderingKey(key))
		require.NoError(t, err)
	}
	cons := newConsumer(t, q, ConsumerConfig{BlockTimeout: 5 * time.Second})
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // busy: shard 0's waiter parks
	require.NoError(t, m.Ack(ctx))
	for range 2 { // the consumer drains the shard
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Ack(ctx))
	}
	got := make(chan *Message, 1)
	go func() {
		m, _ := cons.Receive(ctx)
		got <- m
	}()
	time.Sleep(100 * time.Millisecond) // waiting for work
	start := time.Now()
	id, err := q.Enqueue(ctx, []byte("later"), OrderingKey(key))
	require.NoError(t, err)
	m = <-got
	require.True(t, m != nil)
	assert.Equal(t, id, m.ID)
	t.Logf("picked up %v after its enqueue", time.Since(start))
	assert.Less(t, time.Since(start), time.Second)
}
