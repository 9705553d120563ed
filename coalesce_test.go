package prioq

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// The tests below hold the server's writes with CLIENT PAUSE (Redis ≥ 6.2) so
// that one call is in flight while the others arrive: what they check is how
// many calls reach Redis, which is what a merge changes, and that each caller
// still gets its own outcome. Each runs on a server of its own, whose command
// counts no other test moves, and watches it through a pool of its own (ctl):
// on the queue's pool, radix could queue an INFO behind a held call.

// pausableServer starts a server for one test: c, a pool of n for the
// queue, and ctl, a connection of its own to pause and watch the server.
func pausableServer(t *testing.T, n int) (c, ctl radix.Client) {
	addr := ownServer(t)
	return ownPool(t, addr, n), ownPool(t, addr, 1)
}

// pauseWrites holds every write of the server for d, from a connection of
// its own, and returns at once.
func pauseWrites(t *testing.T, c radix.Client, d time.Duration) {
	t.Helper()
	require.NoError(t, c.Do(context.Background(), radix.Cmd(nil, "CLIENT", "PAUSE", strconv.Itoa(int(d.Milliseconds())), "WRITE")))
}

// quiet is a consumer config for the tests of a paused server: no
// heartbeat, whose writes the pause would hold too, adding to the blocked
// clients startHeld counts (the worker registry has tests of its own).
var quiet = ConsumerConfig{NoPromoter: true, NoHeartbeat: true}

// startHeld runs call in a goroutine and returns once the call is in flight
// and held by the pause: the server counts one more blocked client than
// before (the tests have no other blocking client), and the coalescer is busy.
func startHeld(t *testing.T, ctl radix.Client, busy func() bool, call func() error) chan error {
	t.Helper()
	before := infoInt(t, ctl, "clients", "blocked_clients")
	done := make(chan error, 1)
	go func() { done <- call() }()
	deadline := time.Now().Add(5 * time.Second)
	for !(busy() && infoInt(t, ctl, "clients", "blocked_clients") > before) {
		select {
		case err := <-done:
			t.Fatalf("the first call ended before it was seen held by the pause: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first call is not held by the pause (busy %v, blocked clients %d, before %d)",
				busy(), infoInt(t, ctl, "clients", "blocked_clients"), before)
		}
		time.Sleep(time.Millisecond)
	}
	return done
}

// isBusy reports whether a merged call of kind m of q's shard is in flight.
func isBusy(q *Queue, m store.Merger) func() bool {
	return func() bool {
		busy, _ := sh(q).MergerState(m, 0)
		return busy
	}
}

// takesBusy reports whether a take of the default lease is in flight.
func takesBusy(q *Queue) func() bool {
	return func() bool {
		busy, _ := sh(q).MergerState(store.MergedTakes, DefaultLease)
		return busy
	}
}

// Fifty goroutines enqueueing at once while a first enqueue is held: the
// fifty go in one call, each gets its own id, all are stored. (Before
// merging: fifty RPUSHes.)
func TestConcurrentEnqueuesShareRoundTrips(t *testing.T) {
	c, ctl := pausableServer(t, 8)
	ctx := ctxT(t, 20*time.Second)
	for _, mode := range []Mode{AtLeastOnce, AtMostOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			q := openQueue(t, c, Config{Layout: Levels(3), Mode: mode})
			before := commandCalls(t, ctl)
			pauseWrites(t, ctl, 500*time.Millisecond)
			first := startHeld(t, ctl, isBusy(q, store.MergedEnqueues), func() error {
				_, err := q.Enqueue(ctx, []byte("first"), Priority(1))
				return err
			})
			const n = 50
			ids := make([]string, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ids[i], errs[i] = q.Enqueue(ctx, []byte(fmt.Sprintf("m%d", i)), Priority(int64(i%3)))
				}()
			}
			wg.Wait()
			require.NoError(t, <-first)
			seen := map[string]bool{}
			for i := range n {
				require.NoError(t, errs[i])
				require.NotEmpty(t, ids[i])
				assert.False(t, seen[ids[i]], "id %s given twice", ids[i])
				seen[ids[i]] = true
			}
			after := commandCalls(t, ctl)
			rpush := after["rpush"] - before["rpush"]
			t.Logf("%d enqueues: %d RPUSH", n+1, rpush)
			// The first alone, then at most one RPUSH per lane (3) for the fifty.
			assert.LessOrEqual(t, rpush, 1+3)
			size, err := q.Len(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(n+1), size)
		})
	}
}

// An enqueue whose ctx ends while it waits for its turn is not sent: nothing
// is stored for it. (Before merging, the RPUSH was sent and stored when the
// pause ended, after the caller had been told it failed.)
func TestQueuedEnqueueGivenUpIsNotStored(t *testing.T) {
	c, ctl := pausableServer(t, 8)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(2)})
	pauseWrites(t, ctl, 500*time.Millisecond)
	first := startHeld(t, ctl, isBusy(q, store.MergedEnqueues), func() error {
		_, err := q.Enqueue(ctx, []byte("first"))
		return err
	})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := q.Enqueue(short, []byte("given up"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, <-first)
	peek, err := q.Peek(ctx, 10)
	require.NoError(t, err)
	require.Len(t, peek, 1)
	assert.Equal(t, "first", string(peek[0].Payload))
}

// Acks arriving while one is held go in one pipeline, and each ack reports
// its own fence: the stale ones (whose lease was taken back) fail with
// ErrLeaseLost, the others succeed, in the same merged call.
func TestConcurrentAcksShareRoundTripsAndKeepTheirFences(t *testing.T) {
	c, ctl := pausableServer(t, 8)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(1)})
	const n, stale = 40, 8
	for i := range n {
		_, err := q.Enqueue(ctx, []byte(fmt.Sprintf("m%d", i)))
		require.NoError(t, err)
	}
	// The first `stale` messages get a lease that runs out at once and are
	// swept back: their deliveries are stale.
	old, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), stale, time.Millisecond)
	require.NoError(t, err)
	require.Len(t, old, stale)
	time.Sleep(5 * time.Millisecond)
	back, _, _, err := sh(q).Sweep(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, stale, back)
	live, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), n, time.Minute)
	require.NoError(t, err)
	require.Len(t, live, n)

	callsBefore := commandCalls(t, ctl)
	pauseWrites(t, ctl, 500*time.Millisecond)
	first := startHeld(t, ctl, isBusy(q, store.MergedAcks), func() error { return live[0].Ack(ctx) })
	readsBefore := infoInt(t, ctl, "stats", "total_reads_processed")
	all := append(append([]*Message(nil), old...), live[1:]...)
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, m := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Ack(ctx)
		}()
	}
	wg.Wait()
	require.NoError(t, <-first)
	for i, err := range errs {
		if i < stale {
			assert.ErrorIs(t, err, ErrLeaseLost, "stale delivery %d", i)
		} else {
			assert.NoError(t, err, "live delivery %d", i)
		}
	}
	reads := infoInt(t, ctl, "stats", "total_reads_processed") - readsBefore
	zrem := commandCalls(t, ctl)["zrem"] - callsBefore["zrem"]
	t.Logf("%d acks: %d ZREM, %d reads by the server for the %d acks queued behind the first (INFO included)", len(all)+1, zrem, reads, len(all))
	assert.Equal(t, len(all)+1, zrem, "each ack is fenced by its own ZREM")
	// The merged pipeline (a read or a few) and the INFOs; separate acks
	// would make a read each, less what the client's own pipelining joins.
	assert.LessOrEqual(t, reads, 8)
	size, err := q.Len(ctx)
	require.NoError(t, err)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, size)
	assert.Zero(t, st.InFlight)
}

// Consumers of one queue that take at the same time share one take script
// call; each message goes to exactly one of them, the highest priorities to
// the first askers.
func TestConcurrentTakesShareOneCall(t *testing.T) {
	c, ctl := pausableServer(t, 16)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	const n = 12
	for i := range n {
		_, err := q.Enqueue(ctx, []byte(fmt.Sprintf("m%d", i)), Priority(int64(i%3)))
		require.NoError(t, err)
	}
	cons := make([]*Consumer, n)
	for i := range cons {
		cons[i] = newConsumer(t, q, quiet)
	}
	before := commandCalls(t, ctl)
	pauseWrites(t, ctl, 500*time.Millisecond)
	got := make([]*Message, n)
	errs := make([]error, n)
	first := startHeld(t, ctl, takesBusy(q), func() error {
		var err error
		got[0], err = cons[0].Receive(ctx)
		return err
	})
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = cons[i].Receive(ctx)
		}()
	}
	wg.Wait()
	errs[0] = <-first
	assert.Equal(t, int64(2), got[0].Priority, "the first asker gets the highest priority")
	seen := map[string]bool{}
	for i := range n {
		require.NoError(t, errs[i])
		assert.False(t, seen[got[i].ID], "message %s delivered twice", got[i].ID)
		seen[got[i].ID] = true
		require.NoError(t, got[i].Ack(ctx))
	}
	pops := commandCalls(t, ctl)["lmpop"] - before["lmpop"]
	t.Logf("%d receives: %d pops", n, pops)
	// The first take alone (one pop), then one take for the eleven others:
	// a pop per lane it empties (3). Separate takes would pop eleven times.
	assert.LessOrEqual(t, pops, 1+3)
	assert.Len(t, seen, n)
}

// A consumer closing while its take waits behind another consumer's drops
// that take at once: Close does not wait for the pause, and nothing is
// leased for it.
func TestCloseDropsAQueuedTake(t *testing.T) {
	c, ctl := pausableServer(t, 8)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(2)})
	for range 5 {
		_, err := q.Enqueue(ctx, []byte("m"))
		require.NoError(t, err)
	}
	a := newConsumer(t, q, quiet)
	b, err := q.NewConsumer(quiet)
	require.NoError(t, err)
	pauseWrites(t, ctl, 800*time.Millisecond)
	first := startHeld(t, ctl, takesBusy(q), func() error { _, err := a.Receive(ctx); return err })
	queued := make(chan error, 1)
	go func() { _, err := b.Receive(ctx); queued <- err }()
	require.Eventually(t, func() bool {
		_, queued := sh(q).MergerState(store.MergedTakes, DefaultLease)
		return queued == 1
	}, 5*time.Second, time.Millisecond, "b's take waits behind a's")
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, b.Close(cctx))
	took := time.Since(start)
	assert.ErrorIs(t, <-queued, ErrClosed)
	require.NoError(t, <-first)
	t.Logf("Close returned in %v while a's take was held", took)
	assert.Less(t, took, 500*time.Millisecond, "Close did not wait for the held take")
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.InFlight, "only a's message is leased")
	assert.Equal(t, int64(4), st.Ready)
}

// A call queued behind a merged call returns by its own deadline (its
// ctx's, else CallTimeout from when it was made), however many merged calls
// are ahead of it. Before the fix each merged call had its own CallTimeout:
// with Redis paused, the last of 1,000 enqueues returned after ~1.5 s.
func TestQueuedCallsReturnByTheirDeadline(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	addr := ownServer(t)
	cl := ownPool(t, addr, 8)
	q := openQueue(t, cl, Config{Layout: Levels(1), CallTimeout: 300 * time.Millisecond})
	admin := ownPool(t, addr, 1)
	require.NoError(t, admin.Do(ctx, radix.Cmd(nil, "CLIENT", "PAUSE", "3000", "WRITE")))
	t.Cleanup(func() { _ = admin.Do(context.Background(), radix.Cmd(nil, "CLIENT", "UNPAUSE")) })

	var wg sync.WaitGroup
	var slowest atomic.Int64
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, _ = q.Enqueue(context.Background(), []byte("x"))
			if d := int64(time.Since(start)); d > slowest.Load() {
				for old := slowest.Load(); d > old && !slowest.CompareAndSwap(old, d); old = slowest.Load() {
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("slowest enqueue returned after %v", time.Duration(slowest.Load()).Round(time.Millisecond))
	assert.Less(t, time.Duration(slowest.Load()), 300*time.Millisecond+store.AbandonGrace+300*time.Millisecond)
}
