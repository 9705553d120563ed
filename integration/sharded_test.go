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
	inversion "github.com/prioq/prioq/internal/inversions"
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
	acked  map[string]bool      // enqueue returned nil
	stored int                  // stored but not acknowledged (ErrNotReplicated, or ErrDuplicate on a retry)
	seen   map[string]int       // deliveries
	first  map[string]time.Time // when each was first handed to a handler
	ready  map[string]time.Time // before the first enqueue attempt of each message
	taken  []inversion.Delivery // first deliveries: priority, ready, lease start
	enqErr []string             // errors producers saw
	bgErr  []string             // errors consumers reported (OnError)
	stop   func()
	wait   func()
}

func startShardLoad(t *testing.T, ctx context.Context, q *prioq.Queue, producers, consumers int, pace time.Duration) *shardLoad {
	return startShardLoadOn(t, ctx, q, 0, producers, consumers, pace)
}

// startShardLoadOn is startShardLoad after a backlog of messages of random
// priorities, enqueued (with ids b-0, b-1, …) before the consumers start.
func startShardLoadOn(t *testing.T, ctx context.Context, q *prioq.Queue, backlog, producers, consumers int, pace time.Duration) *shardLoad {
	l := &shardLoad{q: q, acked: map[string]bool{}, seen: map[string]int{}, first: map[string]time.Time{}, ready: map[string]time.Time{}}
	br := newRand(t, 11)
	for i := 0; i < backlog; i += 500 {
		items := make([]prioq.EnqueueItem, min(500, backlog-i))
		for j := range items {
			items[j] = prioq.EnqueueItem{Payload: []byte("x"), Options: []prioq.Option{prioq.ID(fmt.Sprintf("b-%d", i+j)), prioq.Priority(br.Int64N(5))}}
		}
		res, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
		now := time.Now() // (ready: see the producers' below)
		for _, r := range res {
			require.NoError(t, r.Err)
			l.acked[r.ID], l.ready[r.ID] = true, now
		}
	}
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
					// Ready when the enqueue returned: surely in Redis then.
					// (From before the call, a producer descheduled between
					// that instant and its RPUSH, as under the race detector
					// beside other packages' tests, counted inversions for
					// messages not yet stored: 11% in one CI run.)
					if _, ok := l.ready[id]; !ok {
						l.ready[id] = time.Now()
					}
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
		cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 8, Lease: shardLoadLease,
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
				defer l.mu.Unlock()
				if l.seen[m.ID]++; l.seen[m.ID] == 1 {
					l.first[m.ID] = time.Now()
					taken := m.LeaseDeadline().Add(-shardLoadLease)
					ready := l.ready[m.ID]
					if ready.IsZero() || ready.After(taken) {
						ready = taken // taken before its enqueue returned: ready no later
					}
					l.taken = append(l.taken, inversion.Delivery{Prio: m.Priority, Ready: ready, Taken: taken})
				}
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

// shardLoadLease is the lease of the load's consumers.
const shardLoadLease = 3 * time.Second

// inversionRate is the share of first deliveries of p taken while a message
// of priority > p had been ready for 10 ms, and how many deliveries.
func (l *shardLoad) inversionRate() (float64, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.taken) == 0 {
		return 0, 0
	}
	return float64(inversion.Count(l.taken, 10*time.Millisecond)) / float64(len(l.taken)), len(l.taken)
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

	// Producers and two consumers at once, from a backlog: exactly once, no
	// errors, bounded inversions.
	l := startShardLoadOn(t, ctx, q, 3000, 3, 2, time.Millisecond)
	time.Sleep(3 * time.Second)
	l.stop()
	lost, dup := l.drained(t, 20*time.Second)
	l.wait()
	rate, delivered := l.inversionRate()
	t.Logf("cluster %s, 6 shards: %d enqueued, %d lost, %d twice, %d enqueue errors, %d background errors; 2 consumers: %.3f%% inversions of %d deliveries",
		c, len(l.acked), lost, dup, len(l.enqErr), len(l.bgErr), 100*rate, delivered)
	// The bench measures the rate (budget 0.1%). Here, from a backlog, it
	// was 0.03-0.2% and, under the race detector, 0.3-1.1%: the bound is
	// looser, and a fan-in that ignored the shards' priorities (tried once:
	// 39%) exceeds it many times.
	assert.Less(t, rate, 0.05, "several consumers: bounded inversions")
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
	c, q, l := loadedCluster(t, 6)
	slots := q.ShardSlots()
	var moves []string
	for _, shard := range []int{0, 3} {
		owner := c.primaryIndex(c.ownerOf(slots[shard]))
		to := c.primaries[(owner+1)%len(c.primaries)]
		took := c.moveSlot(slots[shard], to, 1, 300*time.Millisecond)
		moves = append(moves, fmt.Sprintf("shard %d (slot %d) to %s in %v", shard, slots[shard], to.addr(), took.Round(time.Millisecond)))
		time.Sleep(500 * time.Millisecond)
	}
	l.finishUnseen(t, "resharding under load: "+strings.Join(moves, "; "))
}

// loadedCluster starts a cluster of 3 primaries, a queue of shards shards on
// it, and 3 producers and 2 consumers that run for a second before it
// returns.
func loadedCluster(t *testing.T, shards int) (*testCluster, *prioq.Queue, *shardLoad) {
	t.Helper()
	leakCheck(t)
	c := newTestCluster(t, 3, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	q, err := prioq.Open(ctx, c.client(ctx, 32), queueName(t), prioq.Config{Layout: prioq.Levels(5), Shards: shards})
	require.NoError(t, err)
	l := startShardLoad(t, ctx, q, 3, 2, 500*time.Microsecond)
	time.Sleep(time.Second)
	return c, q, l
}

// finishUnseen lets the load run a second more, stops it, waits for every
// acknowledged message, and checks that what happened meanwhile (a cluster
// event) went unseen: nothing lost or stuck, no error for producers or
// consumers, nothing delivered twice.
func (l *shardLoad) finishUnseen(t *testing.T, what string) {
	t.Helper()
	time.Sleep(time.Second)
	l.stop()
	lost, dup := l.drained(t, 30*time.Second)
	l.wait()
	t.Logf("%s; %d enqueued, %d lost, %d twice; %d enqueue errors %q, %d background errors %q",
		what, len(l.acked), lost, dup, len(l.enqErr), firstFew(l.enqErr), len(l.bgErr), firstFew(l.bgErr))
	assert.Zero(t, lost, "nothing acknowledged lost, nothing stuck")
	assert.Zero(t, len(l.enqErr), "producers see no error: %q", firstFew(l.enqErr))
	assert.Zero(t, len(l.bgErr), "consumers report no error (a redirect, a stalled call, a lease lost): %q", firstFew(l.bgErr))
	assert.Zero(t, dup, "no consumer fault: nothing delivered twice")
	assert.Greater(t, len(l.acked), 500)
}

// A primary is added and shards are moved to it (a rebalance) under load.
func TestShardedClusterAddPrimary(t *testing.T) {
	c, q, l := loadedCluster(t, 8)
	added := c.addPrimary()
	slots := q.ShardSlots()
	for _, shard := range []int{1, 5} {
		c.moveSlot(slots[shard], added, 4, 20*time.Millisecond)
	}
	perPrimary := map[string]int{}
	for _, slot := range slots {
		perPrimary[c.ownerOf(slot)]++
	}
	l.finishUnseen(t, fmt.Sprintf("primary added, 2 shards moved to it: shards per primary %v", perPrimary))
	assert.Equal(t, 2, perPrimary[added.addr()])
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
	// Probes into the victim's first shard, every 50 ms from the kill on:
	// when the first is stored, and when a consumer first takes one (the
	// consumers serve the other shards meanwhile).
	var probes []string
	storing := time.Duration(0)
	require.Eventually(t, func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		id, err := q.Enqueue(pctx, []byte("probe"), prioq.OrderingKey(key))
		if err == nil || errors.Is(err, prioq.ErrNotReplicated) {
			probes = append(probes, id)
			if storing == 0 {
				storing = time.Since(killed)
			}
		}
		return len(probes) >= 20
	}, 40*time.Second, 50*time.Millisecond, "the victim's shard stores again")
	recovered := storing
	taking := func() time.Duration {
		l.mu.Lock()
		defer l.mu.Unlock()
		var first time.Time
		for _, id := range probes {
			if at, ok := l.first[id]; ok && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		if first.IsZero() {
			return 0
		}
		return first.Sub(killed)
	}
	require.Eventually(t, func() bool { return taking() > 0 }, 30*time.Second, 20*time.Millisecond, "a probe taken")
	taken := taking()
	time.Sleep(time.Second)
	l.stop()
	lost, dup := l.drained(t, 40*time.Second)
	l.wait()
	t.Logf("failover of %s (shards %v): replica promoted after %v, its shards storing again after %v, taken from again after %v; %d acknowledged, %d lost, %d twice, %d stored unconfirmed; %d enqueue errors %q",
		victim.addr(), victimShards, promoted.Round(time.Millisecond), recovered.Round(time.Millisecond), taken.Round(time.Millisecond),
		len(l.acked), lost, dup, l.stored, len(l.enqErr), firstFew(l.enqErr))
	assert.Zero(t, lost, "WaitReplicas 1: nothing acknowledged lost")
	assert.Less(t, recovered, 30*time.Second)
}

// Every queue operation on a queue of 6 shards over 3 primaries: ids are
// idempotent queue-wide, Peek merges in priority order, Cancel finds a
// message in any shard, Pause and Resume stop and restart every shard, dead
// letters are listed, requeued and purged across shards, Purge empties all.
func TestShardedOperationsOnCluster(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 3, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.client(ctx, 16)
	q, err := prioq.Open(ctx, cl, queueName(t), prioq.Config{Layout: prioq.Levels(5), Shards: 6, MaxAttempts: 1})
	require.NoError(t, err)

	// Ids: each of 60 stored once, whichever producer retries it.
	r := newRand(t, 3)
	prios := map[string]int64{}
	for i := range 60 {
		id := fmt.Sprintf("job-%d", i)
		prios[id] = r.Int64N(5)
		_, err := q.Enqueue(ctx, []byte("x"), prioq.ID(id), prioq.Priority(prios[id]))
		require.NoError(t, err)
	}
	for id, p := range prios {
		_, err := q.Enqueue(ctx, []byte("again"), prioq.ID(id), prioq.Priority(4-p))
		assert.ErrorIs(t, err, prioq.ErrDuplicate, id)
	}
	gen, err := q.Enqueue(ctx, []byte("generated"), prioq.Priority(2))
	require.NoError(t, err)
	later, err := q.Enqueue(ctx, []byte("later"), prioq.Delay(time.Hour))
	require.NoError(t, err)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(61), st.Ready)
	assert.Equal(t, int64(1), st.Delayed)
	used := 0
	for _, s := range st.Shards {
		if s.Ready > 0 {
			used++
		}
	}
	assert.Equal(t, 6, used, "60 ids spread over every shard")

	// Peek: highest priority first across shards.
	peek, err := q.Peek(ctx, 100)
	require.NoError(t, err)
	require.Len(t, peek, 61)
	for i := 1; i < len(peek); i++ {
		assert.LessOrEqual(t, peek[i].Priority, peek[i-1].Priority, "Peek merged in priority order (%d)", i)
	}

	// Cancel: a generated id, a caller id, a delayed message; then not found.
	for _, id := range []string{gen, "job-7", later} {
		require.NoError(t, q.Cancel(ctx, id), id)
		assert.ErrorIs(t, q.Cancel(ctx, id), prioq.ErrNotFound, id)
	}
	n, err := q.Len(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(59), n)

	// Pause: nothing is taken from any shard; Resume: everything is.
	require.NoError(t, q.Pause(ctx))
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true, BlockTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		assert.NoError(t, cons.Close(cctx))
		ccancel()
	}()
	rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	msgs, err := cons.ReceiveBatch(rctx, 100)
	rcancel()
	assert.Empty(t, msgs, "paused: %v", err)
	require.NoError(t, q.Resume(ctx))
	// Every message fails once (MaxAttempts 1): dead letters in every shard.
	killAll := func(want int) {
		got := 0
		for got < want {
			msgs, err := cons.ReceiveBatch(ctx, 100)
			require.NoError(t, err)
			for _, m := range msgs {
				require.NoError(t, m.Retry(ctx, 0, "declined"))
			}
			got += len(msgs)
		}
		require.Equal(t, want, got)
	}
	killAll(59)
	dead, err := q.DeadLetters(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, dead, 59)
	for _, d := range dead {
		assert.Equal(t, "declined", d.Reason)
	}
	page, err := q.DeadLetters(ctx, 50, 100)
	require.NoError(t, err)
	assert.Len(t, page, 9, "offsets run across shards")
	assert.Equal(t, dead[50:], page)

	require.NoError(t, q.RequeueDead(ctx, "job-3"))
	assert.ErrorIs(t, q.RequeueDead(ctx, "job-3"), prioq.ErrNotFound)
	moved, err := q.RequeueAllDead(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(58), moved, "the rest came back")
	_, err = q.Enqueue(ctx, []byte("x"), prioq.ID("job-3"))
	assert.ErrorIs(t, err, prioq.ErrDuplicate, "a requeued message keeps its id")
	killAll(59)
	purged, err := q.PurgeDead(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(59), purged)
	_, err = q.Enqueue(ctx, []byte("x"), prioq.ID("job-3"))
	assert.NoError(t, err, "PurgeDead released the ids")
	purged, err = q.Purge(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), purged)
	st, err = q.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Ready+st.Delayed+st.InFlight+st.Dead)
	_, err = q.Enqueue(ctx, []byte("x"), prioq.ID("job-3"))
	assert.NoError(t, err, "Purge released the id")
}

// Consumer processes of a queue of 6 shards over 3 primaries are SIGKILLed
// mid-work, 5 times: every message is handled, and twice only when a kill
// interrupted it (leases expire in their shard, the sweep there redelivers).
func TestShardedConsumerProcessesKilledOnCluster(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 3, false)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := c.client(ctx, 16)
	spec := queueSpec{queueName(t), "levels", "alo"}
	cfg := spec.config()
	cfg.Shards = 6
	q, err := prioq.Open(ctx, cl, spec.name, cfg)
	require.NoError(t, err)
	sent := map[string]bool{}
	for len(sent) < 10000 {
		items := make([]prioq.EnqueueItem, 1000)
		for i := range items {
			items[i] = prioq.EnqueueItem{Payload: []byte("job"), Options: []prioq.Option{prioq.Priority(int64(i % 5))}}
		}
		res, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
		for _, r := range res {
			sent[r.ID] = true
		}
	}
	addr := "cluster:" + strings.Join(c.addrs(), ",")
	killConsumers(t, ctx, q, sent, 5, func() *helperProc {
		return startHelper(t, "consume", addr, spec, "H_WORKERS=4", "H_SHARDS=6")
	})
}

// An enqueue whose lane is still on a slot's old primary but whose wake-up
// key has moved on (a slot half migrated) stores the message and sets the
// wake-up on the new primary: before, the pipeline's ZADD was refused with
// ASK and dropped, and idle consumers did not hear of the message until a
// sweep re-armed the wake-up. (Found by a review.)
func TestEnqueueSetsTheWakeUpWhileItsSlotMoves(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 3, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.client(ctx, 8)
	q, err := prioq.Open(ctx, cl, queueName(t), prioq.Config{Layout: prioq.Levels(2)})
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("first"), prioq.Priority(1)) // the lane and the totals exist
	require.NoError(t, err)
	wake := "prioq:{" + q.Name() + "}:wake"
	slot := int(radix.ClusterSlot([]byte(wake)))
	from := c.byAddr(c.ownerOf(slot))
	to := c.primaries[(c.primaryIndex(from.addr())+1)%len(c.primaries)]
	require.NoError(t, nodeDo(ctx, from.addr(), nil, "DEL", wake)) // a consumer popped it
	s := strconv.Itoa(slot)
	require.NoError(t, nodeDo(ctx, to.addr(), nil, "CLUSTER", "SETSLOT", s, "IMPORTING", c.nodeID(from)))
	require.NoError(t, nodeDo(ctx, from.addr(), nil, "CLUSTER", "SETSLOT", s, "MIGRATING", c.nodeID(to)))

	_, err = q.Enqueue(ctx, []byte("second"), prioq.Priority(1))
	require.NoError(t, err)
	onTarget := func() bool {
		conn, err := radix.Dial(ctx, "tcp", to.addr())
		require.NoError(t, err)
		defer conn.Close()
		var score radix.Maybe
		p := radix.NewPipeline()
		p.Append(radix.Cmd(nil, "ASKING"))
		p.Append(radix.Cmd(&score, "ZSCORE", wake, "w"))
		require.NoError(t, conn.Do(ctx, p))
		return !score.Null
	}
	var onSource []string
	require.NoError(t, nodeDo(ctx, from.addr(), &onSource, "CLUSTER", "GETKEYSINSLOT", s, "100"))
	assert.True(t, onTarget(), "the wake-up is set on the new primary")
	assert.NotContains(t, onSource, wake)
	assert.Contains(t, onSource, "prioq:{"+q.Name()+"}:lane:1", "the message went to its lane on the old primary")
}

// A MultiConsumer on a cluster of 3 primaries: one subscribed connection per
// primary (each shard's channel on the node of its slot), every message of 60
// queues (some of 4 shards) picked up from its announcement, and a queue
// whose slot moves to another primary is followed there.
func TestMultiConsumerOnCluster(t *testing.T) {
	c := newTestCluster(t, 3, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := c.client(ctx, 8)
	base := "multi-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var qs []*prioq.Queue
	for i := range 60 {
		shards := 1
		if i%10 == 0 {
			shards = 4
		}
		q, err := prioq.Open(ctx, cl, fmt.Sprintf("%s-%02d", base, i), prioq.Config{Shards: shards})
		require.NoError(t, err)
		qs = append(qs, q)
	}
	onErr := func(err error) { t.Logf("background: %v", err) }
	mc, err := prioq.NewMultiConsumer(ctx, cl, prioq.MultiConfig{Pattern: base + "-*", ProbeInterval: 500 * time.Millisecond,
		Consumer: prioq.ConsumerConfig{OnError: onErr}})
	require.NoError(t, err)
	defer mc.Close(context.Background())
	require.Len(t, mc.Queues(), 60)

	perNode := map[string]int{}
	for _, q := range qs {
		for _, node := range q.ShardNodes() {
			perNode[node]++
		}
	}
	require.Len(t, perNode, 3, "the queues' shards are on every primary")
	require.Eventually(t, func() bool {
		for _, p := range c.primaries {
			var chans []string
			if nodeDo(ctx, p.addr(), &chans, "PUBSUB", "SHARDCHANNELS", "prioq*{"+base+"*") != nil || len(chans) != perNode[p.addr()] {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "each shard's channel subscribed on its own node: %v", perNode)

	receive := func(want string) time.Duration {
		start := time.Now()
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, want, string(m.Payload))
		require.NoError(t, m.Ack(ctx))
		return time.Since(start)
	}
	var slowest time.Duration
	for _, q := range qs {
		_, err := q.Enqueue(ctx, []byte(q.Name()), prioq.OrderingKey(q.Name()))
		require.NoError(t, err)
		slowest = max(slowest, receive(q.Name()))
	}
	t.Logf("60 queues on 3 primaries, one message each: slowest pickup %v", slowest)
	require.Less(t, slowest, 400*time.Millisecond, "picked up from announcements, not probes")

	// Move one queue's slot: its node drops the subscription, the consumer
	// subscribes on the new node, and the queue is served as before.
	q := qs[1]
	slot := q.ShardSlots()[0]
	owner := c.primaryIndex(c.ownerOf(slot))
	to := c.primaries[(owner+1)%len(c.primaries)]
	c.moveSlot(slot, to, 10, 0)
	require.Eventually(t, func() bool {
		var n []string
		return nodeDo(ctx, to.addr(), &n, "PUBSUB", "SHARDNUMSUB", "prioq:{"+q.Name()+"}:wake") == nil && len(n) == 2 && n[1] == "1"
	}, 15*time.Second, 50*time.Millisecond, "subscribed on the new owner")
	_, err = q.Enqueue(ctx, []byte("moved"))
	require.NoError(t, err)
	t.Logf("after its slot moved: picked up in %v", receive("moved"))
}
