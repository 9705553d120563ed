package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/redisfind"
)

// startCluster starts three primaries, splits the 16384 slots between them
// (CLUSTER ADDSLOTSRANGE, Redis ≥ 7.0) and waits for cluster_state:ok.
func startCluster(t *testing.T) []*localProc {
	bin := needBinary(t, redisfind.Binary())
	var nodes []*localProc
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		nodes = append(nodes, startLocal(t, bin, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--loglevel", "warning"))
	}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, n := range nodes {
		require.NoError(t, nodeDo(ctx, n.addr(), nil, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(ranges[i][0]), strconv.Itoa(ranges[i][1])))
	}
	for _, n := range nodes[1:] {
		require.NoError(t, nodeDo(ctx, nodes[0].addr(), nil, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port)))
	}
	waitClusterOK(t, nodes)
	return nodes
}

func waitClusterOK(t *testing.T, nodes []*localProc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			var info string
			if err := nodeDo(ctx, n.addr(), &info, "CLUSTER", "INFO"); err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	}, 25*time.Second, 50*time.Millisecond, "cluster did not reach cluster_state:ok")
}

// queueOnNode finds a queue name whose hash tag lands in node i's slots.
func queueOnNode(prefix string, i int) string {
	lo, hi := [3]uint16{0, 5461, 10923}[i], [3]uint16{5460, 10922, 16383}[i]
	for k := 0; ; k++ {
		name := fmt.Sprintf("%s-%d", prefix, k)
		if s := radix.ClusterSlot([]byte("{" + name + "}")); s >= lo && s <= hi {
			return name
		}
	}
}

// Three queues, one per primary, used only through radix's Cluster client:
// every operation works, and one primary restarted mid-run (SIGKILL, AOF
// always) loses nothing; its queue's consumers resume by themselves.
func TestClusterThreePrimaries(t *testing.T) {
	leakCheck(t)
	nodes := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr())
	}
	cl, err := radix.ClusterConfig{PoolConfig: prioq.LazyPools(radix.PoolConfig{Size: 24, PingInterval: -1})}.New(ctx, addrs)
	require.NoError(t, err)
	defer cl.Close()

	specs := []struct {
		cfg  prioq.Config
		prio func(i int) int64
	}{
		{prioq.Config{Layout: prioq.Levels(3)}, func(i int) int64 { return int64(i % 3) }},
		{prioq.Config{Layout: prioq.Range(-1<<40, 1<<40, 16)}, func(i int) int64 { return int64(i%9-4) << 36 }},
		{prioq.Config{Layout: prioq.Levels(3), Mode: prioq.AtMostOnce}, func(i int) int64 { return int64(i % 3) }},
		// A Range queue's AtMostOnce consumers take with take.lua, which
		// builds its priorities' list names: on a primary not restarted.
		{prioq.Config{Layout: prioq.Range(-1<<40, 1<<40, 16), Mode: prioq.AtMostOnce}, func(i int) int64 { return int64(i%9-4) << 36 }},
	}
	base := queueName(t)
	queues := make([]*prioq.Queue, len(specs))
	for i, s := range specs {
		name := queueOnNode(base+"-b", 1)
		if i < 3 {
			name = queueOnNode(base, i)
		}
		queues[i], err = prioq.Open(ctx, cl, name, s.cfg)
		require.NoError(t, err)
		// The inspection and control calls, through the cluster client.
		_, err = queues[i].Enqueue(ctx, []byte("dup"), prioq.ID("fixed-id"))
		require.NoError(t, err)
		_, err = queues[i].Enqueue(ctx, []byte("dup"), prioq.ID("fixed-id"))
		assert.ErrorIs(t, err, prioq.ErrDuplicate)
		later, err := queues[i].Enqueue(ctx, []byte("later"), prioq.Delay(time.Hour))
		require.NoError(t, err)
		require.NoError(t, queues[i].Cancel(ctx, later))
		require.NoError(t, queues[i].Cancel(ctx, "fixed-id"))
		peek, err := queues[i].Peek(ctx, 5)
		require.NoError(t, err)
		assert.Empty(t, peek)
		st, err := queues[i].Stats(ctx)
		require.NoError(t, err)
		assert.Zero(t, st.Ready+st.Delayed)
		if s.cfg.Mode == prioq.AtLeastOnce {
			require.NoError(t, queues[i].Pause(ctx))
			require.NoError(t, queues[i].Resume(ctx))
		}
	}

	var mu sync.Mutex
	enqueued := map[string]bool{}
	handled := map[string]int{}
	runCtx, stopRun := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	var consumers []*prioq.Consumer
	for _, q := range queues {
		cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 4, Lease: 2 * time.Second,
			SweepInterval: 200 * time.Millisecond, BlockTimeout: time.Second, RetryInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		consumers = append(consumers, cons)
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			_ = cons.Run(runCtx, func(ctx context.Context, m *prioq.Message) error {
				mu.Lock()
				handled[m.ID]++
				mu.Unlock()
				return nil
			})
		}()
	}
	prodCtx, stopProd := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	for qi, q := range queues {
		pwg.Add(1)
		go func(qi int, q *prioq.Queue) {
			defer pwg.Done()
			for i := 0; prodCtx.Err() == nil; i++ {
				id := fmt.Sprintf("q%d-%d", qi, i)
				opts := []prioq.Option{prioq.ID(id), prioq.Priority(specs[qi].prio(i))}
				if i%5 == 0 {
					opts = append(opts, prioq.Delay(time.Duration(i%300)*time.Millisecond))
				}
				c, cancel := context.WithTimeout(prodCtx, 300*time.Millisecond)
				_, err := q.Enqueue(c, []byte("x"), opts...)
				cancel()
				if err == nil {
					mu.Lock()
					enqueued[id] = true
					mu.Unlock()
				} else {
					time.Sleep(20 * time.Millisecond)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}(qi, q)
	}
	time.Sleep(1500 * time.Millisecond)
	victim := nodes[0] // owns queues[0]
	victim.kill()
	time.Sleep(time.Second)
	victim.start(t)
	restarted := time.Now()
	waitClusterOK(t, nodes)
	t.Logf("primary %s back in the cluster %v after its restart", victim.addr(), time.Since(restarted).Round(time.Millisecond))
	time.Sleep(1500 * time.Millisecond)
	stopProd()
	pwg.Wait()

	var lost int
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		lost = 0
		for id := range enqueued {
			if handled[id] == 0 {
				lost++
			}
		}
		return lost == 0
	}, time.Minute, 50*time.Millisecond, "messages not delivered after the restart")
	stopRun()
	cwg.Wait()
	for _, c := range consumers {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		assert.NoError(t, c.Close(cctx))
		cancel()
	}
	per := map[byte]int{}
	for id := range enqueued {
		per[id[1]]++
	}
	t.Logf("cluster: %d enqueues acked (per queue %d/%d/%d/%d), %d lost", len(enqueued), per['0'], per['1'], per['2'], per['3'], lost)
	for qi := range queues {
		assert.Greater(t, per[byte('0'+qi)], 100, "queue %d made progress", qi)
	}
}
