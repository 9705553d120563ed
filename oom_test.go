package prioq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// At maxmemory with noeviction Redis refuses a command that may grow memory,
// and refuses a script only at its first such write. Work that frees or keeps
// memory (take, ack, retry, extend, sweep, promotion) must keep running while
// Redis is full, and a call that reports failure must not have stored its
// message.

func usedMemory(t *testing.T, c radix.Client) int64 {
	t.Helper()
	return int64(infoInt(t, c, "memory", "used_memory"))
}

func setMaxMemory(t *testing.T, c radix.Client, n int64) {
	t.Helper()
	require.NoError(t, c.Do(context.Background(), radix.Cmd(nil, "CONFIG", "SET", "maxmemory", strconv.FormatInt(n, 10))))
}

func TestAtMaxMemoryShrinkingWorkKeepsRunning(t *testing.T) {
	addr := ownServer(t, "--maxmemory-policy", "noeviction")
	c := ownPool(t, addr, 8)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			for i := 0; i < 20; i++ {
				_, err := q.Enqueue(ctx, []byte(fmt.Sprintf("ready %d", i)), Priority(int64(i%3)))
				require.NoError(t, err)
			}
			_, err := q.Enqueue(ctx, []byte("due soon"), Delay(300*time.Millisecond), Priority(1))
			require.NoError(t, err)
			expiring, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 2, 200*time.Millisecond)
			require.NoError(t, err)
			require.Len(t, expiring, 2)
			held, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 3, time.Hour)
			require.NoError(t, err)
			require.Len(t, held, 3)
			before, err := q.Stats(ctx)
			require.NoError(t, err)

			setMaxMemory(t, c, usedMemory(t, c)-256<<10) // over the limit from here on
			t.Cleanup(func() { setMaxMemory(t, c, 0) })

			// Growing work is refused and stores nothing.
			_, err = q.Enqueue(ctx, []byte("refused"))
			assert.ErrorContains(t, err, "OOM")
			_, err = q.Enqueue(ctx, []byte("refused"), ID("oom-1"), Priority(2))
			assert.ErrorContains(t, err, "OOM")
			_, err = q.Enqueue(ctx, []byte("refused"), Delay(time.Minute))
			assert.ErrorContains(t, err, "OOM")
			_, err = q.EnqueueBatch(ctx, []EnqueueItem{{Payload: []byte("a")}, {Payload: []byte("b")}})
			assert.ErrorContains(t, err, "OOM")
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, before.Ready, st.Ready)
			assert.Equal(t, before.Delayed, st.Delayed)

			// Work that frees or keeps memory goes on.
			assert.NoError(t, held[0].Extend(ctx, 2*time.Hour), "extend at maxmemory")
			require.NoError(t, held[1].Ack(ctx), "ack at maxmemory")
			assert.NoError(t, held[2].Retry(ctx, time.Millisecond, "again"), "retry at maxmemory")
			more, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Hour)
			require.NoError(t, err, "take at maxmemory")
			require.Len(t, more, 1)
			require.NoError(t, more[0].Ack(ctx))

			time.Sleep(350 * time.Millisecond) // leases expired, the delayed message is due
			back, _, _, err := sh(q).Sweep(ctx, 100)
			assert.NoError(t, err, "sweep at maxmemory")
			assert.Equal(t, 2, back, "expired leases redelivered at maxmemory")
			moved := 0
			var promoteErr error
			assert.Eventually(t, func() bool {
				n, _, _, err := sh(q).Promote(ctx)
				promoteErr = err
				moved += n
				return moved == 2 // the retried one and the one due
			}, 3*time.Second, 20*time.Millisecond, "promotion at maxmemory")
			assert.NoError(t, promoteErr, "promotion at maxmemory")

			setMaxMemory(t, c, 0)
			_, err = q.Enqueue(ctx, []byte("now it fits"), ID("oom-1"))
			require.NoError(t, err, "an id whose enqueue failed at maxmemory is free")
		})
	}
}

// TestAtTheMemoryEdgeFailureMeansNotStored walks maxmemory along the edge, a
// few bytes at a time, so that some enqueues pass their first command and
// push Redis over the limit before their second: an enqueue must then report
// success, since its message is stored (a producer retrying it would store it
// twice), and an enqueue that reports failure must have stored nothing.
func TestAtTheMemoryEdgeFailureMeansNotStored(t *testing.T) {
	addr := ownServer(t, "--maxmemory-policy", "noeviction")
	c := ownPool(t, addr, 1) // one connection: INFO and the enqueue see the same client buffers
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			// Where the edge lies depends on the command's own buffers (and
			// INFO's reply is counted when it is measured): walk a band around
			// what INFO reports in 8-byte steps.
			var stored, refused int
			for i := 0; i < 1024; i++ {
				payload := fmt.Sprintf("edge-%05d-%s", i, strings.Repeat("x", 40))
				opts := []Option{Priority(int64(i % 3))}
				grouped := i%2 == 1 && !l.layout.l.SeqMembers() // (grouped.lua)
				if grouped {
					opts = append(opts, Group(fmt.Sprint("g", i%5)))
				}
				setMaxMemory(t, c, usedMemory(t, c)-4096+int64(i)*8)
				_, err := q.Enqueue(ctx, []byte(payload), opts...)
				setMaxMemory(t, c, 0)
				found := containsPayload(t, q, payload)
				if grouped && err != nil {
					require.Empty(t, existingGroupKeys(t, c, q), "a refused message of a group left nothing behind")
				}
				switch {
				case err == nil && !found:
					t.Fatalf("enqueue %d reported success but stored nothing", i)
				case err != nil && found:
					t.Fatalf("enqueue %d reported %v but its message is stored", i, err)
				case err != nil:
					refused++
				default:
					stored++
				}
				if found {
					_, err := q.Purge(ctx)
					require.NoError(t, err)
				}
				if err != nil && !strings.Contains(err.Error(), "OOM") {
					t.Fatalf("unexpected error: %v", err)
				}
			}
			t.Logf("stored %d, refused %d", stored, refused)
			assert.NotZero(t, stored)
			assert.NotZero(t, refused)
		})
	}
}

func containsPayload(t *testing.T, q *Queue, payload string) bool {
	t.Helper()
	msgs, err := q.Peek(context.Background(), 100)
	require.NoError(t, err)
	for _, m := range msgs {
		if string(m.Payload) == payload {
			return true
		}
	}
	return false
}

// TestAtMaxMemoryUnderLoad keeps Redis at its limit with producers faster
// than the consumers, while handlers extend, retry and let leases expire: no
// acknowledged enqueue is lost, no message is stored twice by a producer
// retrying an enqueue that reported failure, and extends, sweeps and
// promotions never fail for lack of memory.
func TestAtMaxMemoryUnderLoad(t *testing.T) {
	testkit.NoLeaks(t, testkit.RadixRunner) // checked last: after the consumer, pool and server stop
	addr := ownServer(t, "--maxmemory-policy", "noeviction")
	c := ownPool(t, addr, 24)
	ctx := ctxT(t, 90*time.Second)
	var bgErrs sync.Map // background errors by text
	q := openQueue(t, c, Config{Layout: Levels(3), MaxAttempts: 20, Backoff: func(int) time.Duration { return 50 * time.Millisecond }})
	setMaxMemory(t, c, usedMemory(t, c)+2<<20) // 2 MiB for the queue
	t.Cleanup(func() { setMaxMemory(t, c, 0) })

	var mu sync.Mutex
	acked := map[string]bool{}             // payloads whose enqueue returned nil
	stored := map[string]map[string]bool{} // payload -> message ids it was delivered under
	handled := map[string]bool{}           // payloads handled to the end
	var refused, extendErrs, extends atomic.Int64
	cons := newConsumer(t, q, ConsumerConfig{Concurrency: 8, Lease: 300 * time.Millisecond, SweepInterval: 100 * time.Millisecond,
		PromoteWait: time.Second, RetryInterval: 20 * time.Millisecond,
		OnError: func(err error) { bgErrs.Store(err.Error(), true) }})
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() {
		runDone <- cons.Run(runCtx, func(ctx context.Context, m *Message) error {
			p := string(m.Payload[:11])
			mu.Lock()
			if stored[p] == nil {
				stored[p] = map[string]bool{}
			}
			stored[p][m.ID] = true
			mu.Unlock()
			n := len(m.ID) + int(m.Payload[10])
			switch {
			case n%3 == 0:
				extends.Add(1)
				if err := m.Extend(ctx, time.Second); err != nil {
					extendErrs.Add(1)
					bgErrs.Store("extend: "+err.Error(), true)
				}
			case n%5 == 0 && m.Attempts == 1:
				return fmt.Errorf("retry me")
			case n%31 == 0 && m.Attempts == 1:
				time.Sleep(400 * time.Millisecond) // past the lease: the sweep gives it back
			}
			time.Sleep(time.Millisecond)
			mu.Lock()
			handled[p] = true
			mu.Unlock()
			return nil
		})
	}()
	prodCtx, stopProd := context.WithTimeout(ctx, 4*time.Second)
	defer stopProd()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			pad := strings.Repeat("x", 2000)
			for i := 0; prodCtx.Err() == nil; i++ {
				p := fmt.Sprintf("p%d-%08d", w, i)
				opts := []Option{Priority(int64(i % 3))}
				if i%2 == 0 {
					opts = append(opts, ID(p))
				}
				if i%4 == 1 {
					opts = append(opts, Delay(time.Duration(i%200)*time.Millisecond))
				}
				for prodCtx.Err() == nil { // retried until acknowledged, as a producer would
					_, err := q.Enqueue(ctx, []byte(p+pad), opts...)
					if err == nil || errors.Is(err, ErrDuplicate) {
						mu.Lock()
						acked[p] = true
						mu.Unlock()
						break
					}
					if !assert.ErrorContains(t, err, "OOM") { // not require: in a goroutine
						return
					}
					refused.Add(1)
					time.Sleep(2 * time.Millisecond)
				}
			}
		}(w)
	}
	wg.Wait()
	var missing int
	assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		missing = 0
		for p := range acked {
			if !handled[p] {
				missing++
			}
		}
		return missing == 0
	}, 60*time.Second, 20*time.Millisecond, "acknowledged messages not handled")
	stopRun()
	<-runDone
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for p, ids := range stored {
		if len(ids) > 1 {
			twice++
			t.Errorf("%s was stored %d times (ids %v)", p, len(ids), ids)
		}
	}
	var errs []string
	bgErrs.Range(func(k, _ any) bool { errs = append(errs, k.(string)); return true })
	for _, e := range errs {
		if strings.Contains(e, "OOM") {
			t.Errorf("refused at maxmemory: %s", e)
		}
	}
	t.Logf("%d enqueues acknowledged, %d refused for memory and retried, %d not handled, %d stored twice, %d extends (%d failed), %d background errors",
		len(acked), refused.Load(), missing, twice, extends.Load(), extendErrs.Load(), len(errs))
	assert.NotZero(t, refused.Load(), "Redis never reached its limit: the test proves nothing")
	assert.Zero(t, extendErrs.Load())
}
