package prioq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func serverPid(t *testing.T, c radix.Client) int {
	t.Helper()
	pid, err := strconv.Atoi(infoValue(t, c, "server", "process_id"))
	require.NoError(t, err)
	return pid
}

// A failover to a replica that lags loses what the primary acknowledged after
// the replica's last sync. With WaitReplicas, an enqueue or an ack returns nil
// only once a replica has it; while replication is stalled they return
// ErrNotReplicated (the write is made all the same). The test stalls
// replication, writes, kills the primary and promotes the replica: every
// enqueue that returned nil must be there, and every ack that returned nil
// must have stayed acked.
func TestWaitReplicasSurvivesFailoverToALaggingReplica(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"without WaitReplicas", Config{}},
		{"WaitReplicas 1", Config{WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			primary, replica := ownReplicated(t, 16, 4)
			primaryPid := serverPid(t, primary)
			ctx := ctxT(t, 60*time.Second)
			cfg := tc.cfg
			cfg.Layout = Levels(3)
			q := openQueue(t, primary, cfg)

			var mu sync.Mutex
			acked := map[string]bool{}
			var notReplicated int
			enqueue := func(prefix string, n int) {
				var wg sync.WaitGroup
				for w := 0; w < 10; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						for i := w; i < n; i += 10 {
							id := fmt.Sprintf("%s-%d", prefix, i)
							opts := []Option{Priority(int64(i % 3))}
							if i%2 == 0 {
								opts = append(opts, ID(id))
							}
							got, err := q.Enqueue(ctx, []byte(id), opts...)
							mu.Lock()
							switch {
							case err == nil:
								acked[string(id)] = true
							case errors.Is(err, ErrNotReplicated):
								assert.NotEmpty(t, got, "the id comes with ErrNotReplicated") // not require: mu is held
								notReplicated++
							default:
								t.Errorf("enqueue %s: %v", id, err)
							}
							mu.Unlock()
						}
					}(w)
				}
				wg.Wait()
			}
			enqueue("synced", 100)
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			first, err := cons.ReceiveBatch(ctx, 10)
			require.NoError(t, err)
			require.NotEmpty(t, first)

			// Everything so far is on the replica before it stalls, so that
			// only what follows can be lost.
			synced := infoValue(t, primary, "replication", "master_repl_offset")
			require.Eventually(t, func() bool {
				got, _ := strconv.ParseInt(infoValue(t, replica, "replication", "slave_repl_offset"), 10, 64)
				want, _ := strconv.ParseInt(synced, 10, 64)
				return got >= want
			}, 10*time.Second, 5*time.Millisecond, "the replica catches up before the stall")

			// Replication stalls: the replica stops taking the primary's stream
			// (stopping its process would not do: the kernel keeps buffering
			// the stream for it, and it catches up when it resumes).
			require.NoError(t, replica.Do(ctx, radix.Cmd(nil, "REPLICAOF", "NO", "ONE")))
			start := time.Now()
			enqueue("stalled", 60)
			ackedWhileStalled := 0
			for _, err := range AckBatch(ctx, first...) {
				if err == nil {
					ackedWhileStalled++
				} else {
					require.ErrorIs(t, err, ErrNotReplicated)
				}
			}
			t.Logf("while replication was stalled: %d enqueues acknowledged, %d returned ErrNotReplicated, %d of %d acks acknowledged (%v)",
				len(acked)-100, notReplicated, ackedWhileStalled, len(first), time.Since(start).Round(time.Millisecond))

			// Failover: the primary dies, the lagging replica takes over.
			require.NoError(t, syscall.Kill(primaryPid, syscall.SIGKILL))
			q2, err := Open(ctx, replica, q.name, cfg)
			require.NoError(t, err)
			there := map[string]bool{}
			peek, err := q2.Peek(ctx, MaxBatch)
			require.NoError(t, err)
			for _, m := range peek {
				there[string(m.Payload)] = true
			}
			taken := map[string]bool{} // in flight on the replica, not in its lanes
			for _, m := range first {
				taken[string(m.Payload)] = true
			}
			lost := 0
			for id := range acked {
				if !there[id] && !taken[id] {
					lost++
				}
			}
			t.Logf("after the failover: %d of %d acknowledged enqueues lost", lost, len(acked))
			if tc.cfg.WaitReplicas > 0 {
				assert.Zero(t, lost, "an enqueue that returned nil was lost")
				assert.Zero(t, ackedWhileStalled, "an ack returned nil while no replica could confirm it")
				assert.Equal(t, 60, notReplicated)
			} else {
				// The scenario is real: without WAIT it loses acknowledged writes.
				assert.Equal(t, 60, lost)
			}
		})
	}
}

// At maxmemory, acks still go through (they free memory) and, with
// WaitReplicas, still wait for the replica and succeed: the total they bump
// (HINCRBY, refused at maxmemory) must not cost them their WAIT or their
// result. (Before, the refused HINCRBY stopped the WAIT and every ack
// returned ErrNotReplicated.)
func TestAcksAtMaxMemoryStillWaitForReplicas(t *testing.T) {
	primary, replica := ownReplicated(t, 8, 2)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, primary, Config{Layout: Levels(2), WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	for i := range 4 {
		opts := []Option{}
		if i == 3 {
			opts = append(opts, ID("mine"))
		}
		_, err := q.Enqueue(ctx, []byte("m"), opts...)
		require.NoError(t, err)
	}
	msgs, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 4, time.Minute)
	require.NoError(t, err)
	require.Len(t, msgs, 4)
	require.NoError(t, primary.Do(ctx, radix.Cmd(nil, "CONFIG", "SET", "maxmemory", "1")))
	t.Cleanup(func() { _ = primary.Do(context.Background(), radix.Cmd(nil, "CONFIG", "SET", "maxmemory", "0")) })

	_, err = q.Enqueue(ctx, []byte("refused"))
	require.Error(t, err, "an enqueue at maxmemory is refused")
	assert.False(t, errors.Is(err, ErrNotReplicated), "and not stored: %v", err)
	var wg sync.WaitGroup
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = m.Ack(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "ack %d (caller id: %v)", i, msgs[i].d.CallerID)
	}
	var left int
	require.NoError(t, replica.Do(ctx, radix.Cmd(&left, "ZCARD", sh(q).Keys().Leases())))
	assert.Zero(t, left, "the replica has the acks")
}

// ownReplicated starts a primary and a replica of it (servers of this test
// only), returns pools of the given sizes on each, and waits until the
// replica's link is up.
func ownReplicated(t *testing.T, primarySize, replicaSize int) (primary, replica radix.Client) {
	t.Helper()
	primaryAddr := ownServer(t)
	host, port, _ := strings.Cut(primaryAddr, ":")
	replicaAddr := ownServer(t, "--replicaof", host, port)
	primary, replica = ownPool(t, primaryAddr, primarySize), ownPool(t, replicaAddr, replicaSize)
	require.Eventually(t, func() bool { return infoValue(t, replica, "replication", "master_link_status") == "up" },
		10*time.Second, 20*time.Millisecond)
	return primary, replica
}

// Retrying an enqueue that returned ErrNotReplicated with the id it
// returned must not store a second copy. Before the fix the retry was stored
// (and returned ErrNotReplicated again): two messages.
func TestRetryAfterNotReplicatedStoresNoCopy(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	cl := ownPool(t, ownServer(t), 4) // no replica: every WAIT falls short
	q := openQueue(t, cl, Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})

	id, err := q.Enqueue(ctx, []byte("generated"))
	require.ErrorIs(t, err, ErrNotReplicated)
	require.NotEmpty(t, id)
	_, err = q.Enqueue(ctx, []byte("generated"), ID(id))
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrNotReplicated), "the retry stored nothing: %v", err)

	mine, err := q.Enqueue(ctx, []byte("mine"), ID("order-1"))
	require.ErrorIs(t, err, ErrNotReplicated)
	assert.Equal(t, "order-1", mine)
	_, err = q.Enqueue(ctx, []byte("mine"), ID("order-1"))
	require.ErrorIs(t, err, ErrDuplicate, "a retry with the caller's own ID is idempotent")

	n, err := q.Len(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "one copy of each")
}
