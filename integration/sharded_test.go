package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// Sharded queues on a real Redis Cluster: shards spread over the primaries,
// and cluster events under load (a live resharding, a primary added, a
// primary failed over) lose nothing acknowledged and, but for the failover,
// show callers no error.

// load runs producers and consumers of one queue and records what they saw.
// Producers give every message an ID and retry it until it is stored, so an
// enqueue that failed is never a lost message; what a producer saw fail is
// counted, as are the background errors consumers report.
type shardLoad struct {
	q      *prioq.Queue
	mu     sync.Mutex
	acked  map[string]bool // enqueue returned nil
	stored int             // stored but not acknowledged (ErrNotReplicated, or ErrDuplicate on a retry)
	seen   map[string]int  // deliveries
	enqErr []string        // errors producers saw
	bgErr  []string        // errors consumers reported (OnError)
	stop   func()
	wait   func()
}

func startShardLoad(t *testing.T, ctx context.Context, q *prioq.Queue, producers, consumers int, pace time.Duration) *shardLoad {
	l := &shardLoad{q: q, acked: map[string]bool{}, seen: map[string]int{}}
	prodCtx, stopProd := context.WithCancel(ctx)
	runCtx, stopRun := context.WithCancel(ctx)
	var pwg, cwg sync.WaitGroup
	rng := newRand(t, 7)
	for p := 0; p < producers; p++ {
		seed := rng.Uint64()
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			r := rand.New(rand.NewPCG(seed, 1))
			for i := 0; prodCtx.Err() == nil; i++ {
				id := fmt.Sprintf("p%d-%d", p, i)
				prio := prioq.Priority(r.Int64N(5))
				for prodCtx.Err() == nil {
					c, cancel := context.WithTimeout(prodCtx, 3*time.Second)
					_, err := q.Enqueue(c, []byte("x"), prioq.ID(id), prio)
					cancel()
					l.mu.Lock()
					switch {
					case err == nil:
						l.acked[id] = true // acknowledged (confirmed, with WaitReplicas)
					case errors.Is(err, prioq.ErrDuplicate), errors.Is(err, prioq.ErrNotReplicated):
						// Stored, but not acknowledged: by an attempt that
						// failed, or not confirmed by a replica.
						l.stored++
					case prodCtx.Err() == nil:
						l.enqErr = append(l.enqErr, err.Error())
					}
					l.mu.Unlock()
					if err == nil || errors.Is(err, prioq.ErrDuplicate) || errors.Is(err, prioq.ErrNotReplicated) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				time.Sleep(pace)
			}
		}()
	}
	var conss []*prioq.Consumer
	for c := 0; c < consumers; c++ {
		cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 8, Lease: 3 * time.Second,
			SweepInterval: 300 * time.Millisecond, BlockTimeout: time.Second, RetryInterval: 100 * time.Millisecond,
			OnError: func(err error) {
				l.mu.Lock()
				l.bgErr = append(l.bgErr, err.Error())
				l.mu.Unlock()
			}})
		require.NoError(t, err)
		conss = append(conss, cons)
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			_ = cons.Run(runCtx, func(_ context.Context, m *prioq.Message) error {
				l.mu.Lock()
				l.seen[m.ID]++
				l.mu.Unlock()
				return nil
			})
		}()
	}
	l.stop = func() { stopProd(); pwg.Wait() }
	l.wait = func() {
		stopRun()
		cwg.Wait()
		for _, c := range conss {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			assert.NoError(t, c.Close(cctx))
			cancel()
		}
	}
	return l
}

// drained waits until every acknowledged message was delivered (or within),
// and returns how many were not, and how many were delivered twice.
func (l *shardLoad) drained(t *testing.T, within time.Duration) (lost, dup int) {
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		lost, dup = 0, 0
		for id := range l.acked {
			switch n := l.seen[id]; {
			case n == 0:
				lost++
			case n > 1:
				dup++
			}
		}
		l.mu.Unlock()
		if lost == 0 || time.Now().After(deadline) {
			return lost, dup
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func firstFew(s []string) []string { return s[:min(len(s), 3)] }

// A queue of 6 shards on 3 primaries: 2 shards each; every operation; exactly
// once without faults; strict order for one consumer draining it.
func TestShardedQueueOnCluster(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 3, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client(ctx, 32)
	q, err := prioq.Open(ctx, cl, queueName(t), prioq.Config{Layout: prioq.Levels(5), Shards: 6})
	require.NoError(t, err)

	perPrimary := map[string]int{}
	for _, slot := range q.ShardSlots() {
		perPrimary[c.ownerOf(slot)]++
	}
	for _, p := range c.primaries {
		assert.Equal(t, 2, perPrimary[p.addr()], "shards on %s", p.addr())
	}

	// Strict order for one consumer draining a preloaded queue.
	r := newRand(t, 1)
	items := make([]prioq.EnqueueItem, 1200)
	for i := range items {
		items[i] = prioq.EnqueueItem{Payload: []byte("x"), Options: []prioq.Option{prioq.Priority(r.Int64N(5))}}
	}
	res, err := q.EnqueueBatch(ctx, items)
	require.NoError(t, err)
	require.Len(t, res, len(items))
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(len(items)), st.Ready)
	checkShardStats(t, c, q, st)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	last, inversions := int64(99), 0
	for got := 0; got < len(items); {
		msgs, err := cons.ReceiveBatch(ctx, 16)
		require.NoError(t, err)
		for _, m := range msgs {
			if m.Priority > last {
				inversions++
			}
			last = m.Priority
			got++
		}
		for _, err := range prioq.AckBatch(ctx, msgs...) {
			require.NoError(t, err)
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	require.NoError(t, cons.Close(cctx))
	ccancel()
	assert.Zero(t, inversions, "one consumer draining: strict priority order across shards")

	// Producers and consumers at once: exactly once, no errors.
	l := startShardLoad(t, ctx, q, 3, 2, time.Millisecond)
	time.Sleep(3 * time.Second)
	l.stop()
	lost, dup := l.drained(t, 20*time.Second)
	l.wait()
	t.Logf("cluster %s, 6 shards: %d enqueued, %d lost, %d twice, %d enqueue errors, %d background errors",
		c, len(l.acked), lost, dup, len(l.enqErr), len(l.bgErr))
	assert.Zero(t, lost)
	assert.Zero(t, dup, "no fault: exactly once")
	assert.Zero(t, len(l.enqErr), "%q", firstFew(l.enqErr))
	assert.Zero(t, len(l.bgErr), "%q", firstFew(l.bgErr))
	assert.Greater(t, len(l.acked), 500)
}

// checkShardStats: the per-shard figures add up to the totals, each names
// the primary that serves its slot, and the prioq command shows the same
// shards, as a table and as JSON.
func checkShardStats(t *testing.T, c *testCluster, q *prioq.Queue, st prioq.Stats) {
	t.Helper()
	require.Len(t, st.Shards, q.Shards())
	var ready int64
	for i, s := range st.Shards {
		ready += s.Ready
		assert.Equal(t, q.ShardSlots()[i], s.Slot)
		assert.Equal(t, c.ownerOf(s.Slot), s.Node, "shard %d", i)
		assert.Positive(t, s.Ready, "shard %d holds some of the batch", i)
	}
	assert.Equal(t, st.Ready, ready)

	bin := buildCLI(t)
	url := "redis+cluster://" + strings.Join(c.addrs(), ",")
	var js struct {
		Ready  int64
		Shards []struct {
			Shard, Slot int
			Node        string
			Ready       int64
		}
	}
	require.NoError(t, json.Unmarshal([]byte(cli(t, bin, url, "stats", q.Name(), "--json")), &js))
	assert.Equal(t, st.Ready, js.Ready)
	require.Len(t, js.Shards, q.Shards())
	table := cli(t, bin, url, "stats", q.Name())
	for i, s := range js.Shards {
		assert.Equal(t, i, s.Shard)
		assert.Equal(t, st.Shards[i].Slot, s.Slot)
		assert.Equal(t, st.Shards[i].Node, s.Node)
		assert.Equal(t, st.Shards[i].Ready, s.Ready)
		assert.Regexp(t, fmt.Sprintf(`(?m)^%d +%d +%s +%d `, i, s.Slot, regexp.QuoteMeta(s.Node), s.Ready), table)
	}
}

// An operator moves slots while producers and consumers run: two shards'
// slots go to other primaries, a key at a time (so each move lasts a while,
// through MIGRATING/IMPORTING, ASK and TRYAGAIN). Callers see no error,
// nothing acknowledged is lost, nothing is stuck.
func TestShardedClusterLiveResharding(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 3, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client(ctx, 32)
	q, err := prioq.Open(ctx, cl, queueName(t), prioq.Config{Layout: prioq.Levels(5), Shards: 6})
	require.NoError(t, err)
	l := startShardLoad(t, ctx, q, 3, 2, 500*time.Microsecond)
	time.Sleep(time.Second)
	slots := q.ShardSlots()
	var moves []string
	for _, shard := range []int{0, 3} {
		owner := c.primaryIndex(c.ownerOf(slots[shard]))
		to := c.primaries[(owner+1)%len(c.primaries)]
		took := c.moveSlot(slots[shard], to, 1, 300*time.Millisecond)
		moves = append(moves, fmt.Sprintf("shard %d (slot %d) to %s in %v", shard, slots[shard], to.addr(), took.Round(time.Millisecond)))
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(time.Second)
	l.stop()
	lost, dup := l.drained(t, 30*time.Second)
	l.wait()
	t.Logf("resharding under load: %s; %d enqueued, %d lost, %d twice; %d enqueue errors %q, %d background errors %q",
		strings.Join(moves, "; "), len(l.acked), lost, dup, len(l.enqErr), firstFew(l.enqErr), len(l.bgErr), firstFew(l.bgErr))
	assert.Zero(t, lost, "nothing acknowledged lost, nothing stuck")
	assert.Zero(t, len(l.enqErr), "producers see no error: %q", firstFew(l.enqErr))
	assert.Zero(t, len(l.bgErr), "consumers report no error (a redirect, a stalled call, a lease lost): %q", firstFew(l.bgErr))
	assert.Zero(t, dup, "no consumer fault: nothing delivered twice")
	assert.Greater(t, len(l.acked), 500)
}

// A primary is added and shards are moved to it (a rebalance) under load.
func TestShardedClusterAddPrimary(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 3, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client(ctx, 32)
	q, err := prioq.Open(ctx, cl, queueName(t), prioq.Config{Layout: prioq.Levels(5), Shards: 8})
	require.NoError(t, err)
	l := startShardLoad(t, ctx, q, 3, 2, 500*time.Microsecond)
	time.Sleep(time.Second)
	added := c.addPrimary()
	slots := q.ShardSlots()
	for _, shard := range []int{1, 5} {
		c.moveSlot(slots[shard], added, 4, 20*time.Millisecond)
	}
	time.Sleep(time.Second)
	l.stop()
	lost, dup := l.drained(t, 30*time.Second)
	l.wait()
	perPrimary := map[string]int{}
	for _, slot := range slots {
		perPrimary[c.ownerOf(slot)]++
	}
	t.Logf("primary added, 2 shards moved to it: shards per primary %v; %d enqueued, %d lost, %d twice; %d enqueue errors, %d background errors %q",
		perPrimary, len(l.acked), lost, dup, len(l.enqErr), len(l.bgErr), firstFew(l.bgErr))
	assert.Equal(t, 2, perPrimary[added.addr()])
	assert.Zero(t, lost)
	assert.Zero(t, len(l.enqErr), "producers see no error: %q", firstFew(l.enqErr))
	assert.Zero(t, len(l.bgErr), "consumers report no error (a redirect, a stalled call, a lease lost): %q", firstFew(l.bgErr))
	assert.Zero(t, dup, "no consumer fault: nothing delivered twice")
}

// The first calls redirected to a new primary, many at once: none waits for
// another's connection pool. radix v4.1.4 makes a pool for a node it is
// redirected to in every goroutine that needs one, and all but the first
// close theirs while holding the lock that every call of the client takes;
// closing a pool still opening its connections takes 100 ms per connection.
// So the first slot moved to a new primary froze every call of the client
// for seconds (3.1 s per losing pool of 32). prioq.LazyPools makes a node's
// pool on its first call instead, and closing one never used is instant.
func TestNewPrimaryDoesNotFreezeTheClient(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 3, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.clientSyncing(ctx, 32, time.Hour) // learns of the new node only from redirects
	key := "{new-primary}:k"
	slot := int(radix.ClusterSlot([]byte(key)))
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "SET", key, "v")))
	added := c.addPrimary()
	// The slot is moving to the new primary and the key has gone: its old
	// primary answers ASK, which radix follows without a topology read.
	from := c.byAddr(c.ownerOf(slot))
	s := strconv.Itoa(slot)
	require.NoError(t, nodeDo(ctx, added.addr(), nil, "CLUSTER", "SETSLOT", s, "IMPORTING", c.nodeID(from)))
	require.NoError(t, nodeDo(ctx, from.addr(), nil, "CLUSTER", "SETSLOT", s, "MIGRATING", c.nodeID(added)))
	require.NoError(t, nodeDo(ctx, from.addr(), nil, "MIGRATE", "127.0.0.1", strconv.Itoa(added.port), key, "0", "5000"))

	const callers = 64
	start := make(chan struct{})
	took := make([]time.Duration, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			var v string
			errs[i] = cl.Do(ctx, radix.Cmd(&v, "GET", key))
			took[i] = time.Since(t0)
			if errs[i] == nil && v != "v" {
				errs[i] = fmt.Errorf("read %q", v)
			}
		}()
	}
	close(start)
	wg.Wait()
	slices.Sort(took)
	t.Logf("%d calls redirected to the new primary at once: median %v, slowest %v", callers, took[callers/2], took[callers-1])
	for _, err := range errs {
		require.NoError(t, err)
	}
	// Each call is one redirect, one topology read and two loopback round
	// trips; a pool closed under the lock costs seconds.
	assert.Less(t, took[callers-1], time.Second, "no call waits for another's pool")
}

// A primary is killed and its replica takes over, under load, with
// WaitReplicas 1: nothing acknowledged is lost, and the queue recovers.
func TestShardedClusterFailover(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 3, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := c.client(ctx, 32)
	q, err := prioq.Open(ctx, cl, queueName(t), prioq.Config{Layout: prioq.Levels(5), Shards: 6,
		WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond, CallTimeout: 2 * time.Second})
	require.NoError(t, err)
	l := startShardLoad(t, ctx, q, 3, 2, time.Millisecond)
	time.Sleep(1500 * time.Millisecond)

	victim := c.primaries[1]
	var victimShards []int
	for i, slot := range q.ShardSlots() {
		if c.ownerOf(slot) == victim.addr() {
			victimShards = append(victimShards, i)
		}
	}
	require.NotEmpty(t, victimShards)
	// An ordering key of the victim's first shard: a generated id says its shard.
	key := ""
	for k := 0; key == ""; k++ {
		id, err := q.Enqueue(ctx, []byte("probe"), prioq.OrderingKey(fmt.Sprint(k)))
		require.NoError(t, err)
		if strings.HasSuffix(id, fmt.Sprintf(".%d", victimShards[0])) {
			key = fmt.Sprint(k)
		}
	}
	killed := time.Now()
	victim.kill()
	// Recovered: the victim's slots served by its former replica, and its
	// shards storing again (unconfirmed: the new primary has no replica).
	require.Eventually(t, func() bool { return c.ownerOf(q.ShardSlots()[victimShards[0]]) == c.replicas[1].addr() },
		30*time.Second, 50*time.Millisecond, "the replica took over")
	promoted := time.Since(killed)
	require.Eventually(t, func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := q.Enqueue(pctx, []byte("probe"), prioq.OrderingKey(key))
		return err == nil || errors.Is(err, prioq.ErrNotReplicated)
	}, 30*time.Second, 50*time.Millisecond, "the victim's shard stores again")
	recovered := time.Since(killed)
	time.Sleep(time.Second)
	l.stop()
	lost, dup := l.drained(t, 40*time.Second)
	l.wait()
	t.Logf("failover of %s (shards %v): replica promoted after %v, its shards storing again after %v; %d acknowledged, %d lost, %d twice, %d stored unconfirmed; %d enqueue errors %q",
		victim.addr(), victimShards, promoted.Round(time.Millisecond), recovered.Round(time.Millisecond),
		len(l.acked), lost, dup, l.stored, len(l.enqErr), firstFew(l.enqErr))
	assert.Zero(t, lost, "WaitReplicas 1: nothing acknowledged lost")
	assert.Less(t, recovered, 30*time.Second)
}
