package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// startSentinelSet starts a primary, a replica of it and one redis-sentinel
// watching them (quorum 1, down after 1 s), and waits until the replica is in
// sync and the sentinel knows it.
func startSentinelSet(t *testing.T) (primary, replica, sentinel *localProc) {
	server := needBinary(t, "redis-server")
	sentinelBin := needBinary(t, "redis-sentinel")
	common := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning"}
	primary = startLocal(t, server, common...)
	replica = startLocal(t, server, append(common, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))...)
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(
		"bind 127.0.0.1\nsentinel monitor pq 127.0.0.1 %d 1\nsentinel down-after-milliseconds pq 1000\n"+
			"sentinel failover-timeout pq 5000\nsentinel parallel-syncs pq 1\n", primary.port)), 0o644))
	sentinel = startLocal(t, sentinelBin, conf)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		return infoField(ctx, replica.addr(), "replication", "master_link_status") == "up"
	}, 20*time.Second, 50*time.Millisecond, "replica never in sync")
	require.Eventually(t, func() bool {
		var replicas []interface{}
		return nodeDo(ctx, sentinel.addr(), &replicas, "SENTINEL", "REPLICAS", "pq") == nil && len(replicas) == 1
	}, 20*time.Second, 50*time.Millisecond, "sentinel never found the replica")
	return primary, replica, sentinel
}

// A Sentinel failover under load: the primary is SIGKILLed with messages
// ready, delayed, in flight and waiting for a retry, and the replica is
// promoted. Every message acknowledged to a producer, before or after the
// failover, must be handled, including delayed messages and retries scheduled
// after it, and expired leases must come back, without restarting anything.
func TestSentinelFailoverRecovers(t *testing.T) {
	leakCheck(t)
	primary, replica, sentinel := startSentinelSet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := radix.SentinelConfig{PoolConfig: radix.PoolConfig{Size: 32, PingInterval: -1}}.New(ctx, "pq", []string{sentinel.addr()})
	require.NoError(t, err)
	defer cl.Close()
	q, err := prioq.Open(ctx, cl, queueName(t), prioq.Config{Layout: prioq.Levels(3), CallTimeout: 2 * time.Second,
		Backoff: func(int) time.Duration { return 300 * time.Millisecond }})
	require.NoError(t, err)

	var mu sync.Mutex
	acked := map[string]bool{} // enqueues that returned nil
	done := map[string]bool{}  // messages whose handler succeeded
	var lastDone time.Time
	cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 8, Lease: time.Second, SweepInterval: 200 * time.Millisecond,
		BlockTimeout: time.Second, PromoteWait: 2 * time.Second, RetryInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() {
		runDone <- cons.Run(runCtx, func(ctx context.Context, m *prioq.Message) error {
			if m.Attempts == 1 && len(m.ID)%4 == 0 { // a quarter fail once and come back after the backoff
				return errors.New("first attempt fails")
			}
			mu.Lock()
			done[m.ID] = true
			lastDone = time.Now()
			mu.Unlock()
			return nil
		})
	}()
	produce := func(prefix string, n int) {
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < n; i += 4 {
					id := prefix + strconv.Itoa(i) + "-" + strconv.Itoa(i%7)
					opts := []prioq.Option{prioq.ID(id), prioq.Priority(int64(i % 3))}
					if i%2 == 0 {
						opts = append(opts, prioq.Delay(time.Duration(100+i%700)*time.Millisecond))
					}
					for ctx.Err() == nil { // a producer retries with the same id until it is acknowledged
						c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
						_, err := q.Enqueue(c, []byte("x"), opts...)
						cancel()
						if err == nil || errors.Is(err, prioq.ErrDuplicate) {
							mu.Lock()
							acked[id] = true
							mu.Unlock()
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			}(w)
		}
		wg.Wait()
	}
	produce("before-", 1500)
	time.Sleep(300 * time.Millisecond) // some in flight, some delayed, some waiting for their retry

	// Replication is asynchronous: let the replica catch up with every
	// acknowledged enqueue first, so that a loss can only be prioq's.
	offset, _ := strconv.ParseInt(infoField(ctx, primary.addr(), "replication", "master_repl_offset"), 10, 64)
	require.Eventually(t, func() bool {
		got, _ := strconv.ParseInt(infoField(ctx, replica.addr(), "replication", "slave_repl_offset"), 10, 64)
		return got >= offset
	}, 10*time.Second, 5*time.Millisecond)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	t.Logf("at the kill: ready %d, delayed %d, in flight %d", st.Ready, st.Delayed, st.InFlight)
	primary.kill()
	killed := time.Now()

	produce("after-", 1000) // retried until the new primary takes them
	produced := time.Since(killed)
	mu.Lock()
	total := len(acked)
	mu.Unlock()
	var missing int
	ok := assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		missing = 0
		for id := range acked {
			if !done[id] {
				missing++
			}
		}
		return missing == 0
	}, 30*time.Second, 20*time.Millisecond, "messages acknowledged to producers were not all handled after the failover")
	mu.Lock()
	drained := lastDone.Sub(killed)
	mu.Unlock()
	if !ok {
		st, err := q.Stats(ctx)
		t.Logf("stuck: %d of %d not handled; stats %+v (%v); sentinel log:\n%s", missing, total, st, err, sentinel.log())
	}
	var now []string
	require.NoError(t, nodeDo(ctx, sentinel.addr(), &now, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "pq"))
	t.Logf("failover to %v: %d enqueues acknowledged (2,500 attempted), %d not handled; the 1,000 after the kill were all acknowledged %v after it; every message handled %v after it",
		now, total, missing, produced.Round(time.Millisecond), drained.Round(time.Millisecond))
	assert.Equal(t, replica.addr(), now[0]+":"+now[1])

	stopRun()
	select {
	case <-runDone:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10 s after its ctx ended")
	}
	closeWithin(t, cons, 5*time.Second)
}

// closeWithin closes cons with a ctx of d and fails if Close does not return
// by then (with a margin for scheduling).
func closeWithin(t *testing.T, cons *prioq.Consumer, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	returned := make(chan error, 1)
	start := time.Now()
	go func() { returned <- cons.Close(ctx) }()
	select {
	case err := <-returned:
		t.Logf("Close returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(d + time.Second):
		t.Fatalf("Close with a %v ctx had not returned after %v", d, d+time.Second)
	}
}
