package prioq

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func TestLeaseExpiryRedeliversAndFencesStaleAcks(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			a, err := q.Enqueue(ctx, []byte("a"), Priority(3))
			require.NoError(t, err)
			cons := newConsumer(t, q, ConsumerConfig{Lease: 300 * time.Millisecond, SweepInterval: 50 * time.Millisecond})

			first, err := cons.Receive(ctx)
			require.NoError(t, err)
			require.Equal(t, a, first.ID)
			assert.Equal(t, 1, first.Attempts)
			b, err := q.Enqueue(ctx, []byte("b"), Priority(3)) // newer, same priority
			require.NoError(t, err)
			// No ack: the lease expires and the sweep puts a back, ahead of b.
			require.Eventually(t, func() bool {
				st, err := q.Stats(ctx)
				return err == nil && st.InFlight == 0 && st.Ready == 2
			}, 5*time.Second, 10*time.Millisecond)
			second, err := cons.Receive(ctx)
			require.NoError(t, err)
			require.Equal(t, a, second.ID, "an expired message is served before newer ones of its priority")
			assert.Equal(t, 2, second.Attempts)
			assert.False(t, time.Now().Before(first.LeaseDeadline()), "redelivered before the lease ended")

			// The first delivery's lease is gone: its ack and extend fail and
			// leave the new lease alone.
			assert.ErrorIs(t, first.Ack(ctx), ErrLeaseLost)
			assert.ErrorIs(t, first.Extend(ctx, time.Minute), ErrLeaseLost)
			assert.ErrorIs(t, first.Retry(ctx, time.Millisecond, "stale"), ErrLeaseLost)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.EqualValues(t, 1, st.InFlight)
			assert.EqualValues(t, 1, st.Ready)

			require.NoError(t, second.Extend(ctx, 10*time.Second))
			time.Sleep(500 * time.Millisecond) // past the original lease: Extend kept it
			require.NoError(t, second.Ack(ctx))
			third, err := cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, b, third.ID)
			require.NoError(t, third.Ack(ctx))
			st, err = q.Stats(ctx)
			require.NoError(t, err)
			assert.Zero(t, st.Ready+st.InFlight+st.Dead+st.Delayed)
		})
	}
}

func TestRetriesEndInDeadLetters(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout, MaxAttempts: 3,
				Backoff: func(int) time.Duration { return 20 * time.Millisecond }})
			id, err := q.Enqueue(ctx, []byte("doomed"), ID("job-7"), Priority(2))
			require.NoError(t, err)
			cons := newConsumer(t, q, ConsumerConfig{Concurrency: 2})
			var calls atomic.Int32
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error)
			go func() {
				done <- cons.Run(runCtx, func(ctx context.Context, m *Message) error {
					calls.Add(1)
					return fmt.Errorf("boom %d", m.Attempts)
				})
			}()
			require.Eventually(t, func() bool {
				st, err := q.Stats(ctx)
				return err == nil && st.Dead == 1
			}, 10*time.Second, 10*time.Millisecond)
			stop()
			require.ErrorIs(t, <-done, context.Canceled)
			assert.EqualValues(t, 3, calls.Load())

			dead, err := q.DeadLetters(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, dead, 1)
			assert.Equal(t, id, dead[0].ID)
			assert.Equal(t, "boom 3", dead[0].Reason)
			assert.Equal(t, 3, dead[0].Attempts)
			assert.Equal(t, []byte("doomed"), dead[0].Payload)
			// While dead, the id is still taken.
			_, err = q.Enqueue(ctx, []byte("again"), ID("job-7"))
			assert.ErrorIs(t, err, ErrDuplicate)

			require.NoError(t, q.RequeueDead(ctx, id))
			assert.ErrorIs(t, q.RequeueDead(ctx, id), ErrNotFound)
			m, err := cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, id, m.ID)
			assert.Equal(t, int64(2), m.Priority)
			assert.Equal(t, 1, m.Attempts, "requeued messages start over")
			require.NoError(t, m.Retry(ctx, time.Millisecond, "once more"))
			m, err = cons.Receive(ctx)
			require.NoError(t, err)
			require.NoError(t, m.Retry(ctx, time.Millisecond, "and again"))
			m, err = cons.Receive(ctx)
			require.NoError(t, err)
			require.NoError(t, m.Retry(ctx, time.Millisecond, "last"))
			require.Eventually(t, func() bool {
				st, err := q.Stats(ctx)
				return err == nil && st.Dead == 1
			}, 5*time.Second, 10*time.Millisecond)
			n, err := q.PurgeDead(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(1), n)
			_, err = q.Enqueue(ctx, []byte("new life"), ID("job-7"))
			assert.NoError(t, err, "purging a dead message releases its id")
		})
	}
}

func TestPauseResume(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			cons := newConsumer(t, q, ConsumerConfig{})
			require.NoError(t, q.Pause(ctx))
			id, err := q.Enqueue(ctx, []byte("x"))
			require.NoError(t, err, "producers keep enqueueing while paused")
			short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
			_, err = cons.Receive(short)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.True(t, st.Paused)
			assert.EqualValues(t, 1, st.Ready)
			assert.Zero(t, st.InFlight)

			start := time.Now()
			require.NoError(t, q.Resume(ctx))
			m, err := cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, id, m.ID)
			assert.Less(t, time.Since(start), time.Second, "Resume wakes idle consumers")
			require.NoError(t, m.Ack(ctx))
		})
	}
}

func TestCorruptEntryGoesToDeadLetters(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			// Garbage placed in the top lane by hand, then a good message.
			top := sh(q).k.lanes[len(sh(q).k.lanes)-1]
			if sh(q).isRange() {
				require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", top, "-1000", "garbage!")))
			} else {
				require.NoError(t, c.Do(ctx, radix.Cmd(nil, "RPUSH", top, "garbage!")))
			}
			good, err := q.Enqueue(ctx, []byte("good"), Priority(0))
			require.NoError(t, err)
			cons := newConsumer(t, q, ConsumerConfig{})
			got := make(chan string, 4)
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error)
			go func() {
				done <- cons.Run(runCtx, func(ctx context.Context, m *Message) error {
					got <- m.ID
					return nil
				})
			}()
			select {
			case id := <-got:
				assert.Equal(t, good, id)
			case <-time.After(5 * time.Second):
				t.Fatal("the consumer stopped at the corrupt entry")
			}
			stop()
			<-done
			dead, err := q.DeadLetters(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, dead, 1)
			assert.Contains(t, dead[0].Reason, "corrupt")
			assert.NotEmpty(t, dead[0].Raw)
		})
	}
}

// --- a consumer process, SIGKILLed mid-handler ----------------------------

const helperEnv = "PRIOQ_TEST_HELPER"

// runHelperProcess is the body of the test binary when it is re-run as a
// consumer process. It counts each delivery in a Redis hash before its handler
// returns, so the parent can tell what was handled and how often.
func runHelperProcess() int {
	ctx := context.Background()
	cl, err := radix.PoolConfig{Size: 8}.New(ctx, "tcp", os.Getenv("PRIOQ_TEST_ADDR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	q, err := Open(ctx, cl, os.Getenv("PRIOQ_TEST_QUEUE"), Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cons, err := q.NewConsumer(ConsumerConfig{Concurrency: 16, Lease: time.Second, SweepInterval: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	counts := os.Getenv("PRIOQ_TEST_COUNTS")
	// Seeded by the parent test, which logs the seed it draws these from.
	seed, _ := strconv.ParseUint(os.Getenv("PRIOQ_TEST_SEED"), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 2))
	var rngMu sync.Mutex
	_ = cons.Run(ctx, func(ctx context.Context, m *Message) error {
		if err := cl.Do(ctx, radix.Cmd(nil, "HINCRBY", counts, m.ID, "1")); err != nil {
			return err
		}
		rngMu.Lock()
		pause := time.Duration(rng.IntN(3)) * time.Millisecond
		rngMu.Unlock()
		time.Sleep(pause)
		return nil
	})
	return 0
}

func TestConsumerProcessKilledMidHandler(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns consumer processes")
	}
	const total, kills = 10000, 6
	c := newClient(t)
	ctx := ctxT(t, 3*time.Minute)
	q := openQueue(t, c, Config{})
	counts := sh(q).k.meta + ":test-counts" // same hash tag, cleaned below
	t.Cleanup(func() { _ = c.Do(context.Background(), radix.Cmd(nil, "DEL", counts)) })

	sent := make([]string, 0, total)
	for len(sent) < total {
		items := make([]EnqueueItem, 500)
		for i := range items {
			items[i] = EnqueueItem{Payload: []byte("work"), Options: []Option{Priority(int64(i % 3))}}
		}
		res, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
		for _, r := range res {
			sent = append(sent, r.ID)
		}
	}
	rng := newRand(t)
	spawn := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=1", "PRIOQ_TEST_ADDR="+testAddr,
			"PRIOQ_TEST_QUEUE="+q.Name(), "PRIOQ_TEST_COUNTS="+counts,
			"PRIOQ_TEST_SEED="+strconv.FormatUint(rng.Uint64(), 10))
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	remaining := func() int64 {
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		return st.Ready + st.InFlight + st.Delayed
	}
	killed := 0
	for killed < kills && remaining() > 0 {
		cmd := spawn()
		time.Sleep(time.Duration(150+rng.IntN(250)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		killed++
	}
	cmd := spawn() // the survivor finishes the work, redelivering what the dead held
	require.Eventually(t, func() bool { return remaining() == 0 }, 2*time.Minute, 50*time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()

	var handled map[string]string
	require.NoError(t, c.Do(ctx, radix.Cmd(&handled, "HGETALL", counts)))
	var lost, dup int
	for _, id := range sent {
		n, _ := strconv.Atoi(handled[id])
		if n == 0 {
			lost++
		}
		if n > 1 {
			dup++
		}
	}
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	t.Logf("%d messages, %d kills: %d handled more than once, %d lost, %d dead", total, killed, dup, lost, st.Dead)
	assert.Zero(t, lost)
	assert.Zero(t, st.Dead)
	assert.Len(t, handled, total)
	// Duplicates come only from deliveries cut by a kill: at most Concurrency
	// (16) in flight per kill, plus acks lost with the process.
	assert.LessOrEqual(t, dup, kills*(16+maxMergedAcks))
}

// Expired leases come back ahead of newer messages and in the order they were
// taken, also when a sweep needs several calls and when one take leased more
// than nine messages (lease tokens of one take sort in take order).
func TestExpiredLeasesComeBackInOrder(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			var want []string
			for i := 0; i < 25; i++ {
				id, err := q.Enqueue(ctx, []byte("x"), Priority(1))
				require.NoError(t, err)
				want = append(want, id)
			}
			first, _, err := sh(q).take(ctx, sh(q).k.highFirst, 12, time.Millisecond)
			require.NoError(t, err)
			second, _, err := sh(q).take(ctx, sh(q).k.highFirst, 12, 20*time.Millisecond)
			require.NoError(t, err)
			require.Len(t, append(first, second...), 24)
			newer, err := q.Enqueue(ctx, []byte("newer"), Priority(1))
			require.NoError(t, err)
			time.Sleep(50 * time.Millisecond)
			for {
				_, _, more, err := sh(q).sweep(ctx, 5) // five at a time: several calls
				require.NoError(t, err)
				if !more {
					break
				}
			}
			peek, err := q.Peek(ctx, 100)
			require.NoError(t, err)
			var got []string
			for _, m := range peek {
				got = append(got, m.ID)
			}
			assert.Equal(t, append(want, newer), got)
		})
	}
}

// leaseMs rounds up to the millisecond: a lease or delay is never shorter
// than asked.
func TestLeaseMs(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 1},
		{time.Millisecond - time.Nanosecond, 1},
		{time.Millisecond, 1},
		{time.Millisecond + time.Nanosecond, 2},
		{1500 * time.Millisecond, 1500},
		{time.Hour, 3600000},
	} {
		assert.Equal(t, tc.want, leaseMs(tc.d), tc.d.String())
	}
	assert.Equal(t, "-42", fmtInt(-42))
}

func TestLeaseSuffix(t *testing.T) {
	a, b := leaseSuffix(), leaseSuffix()
	require.Len(t, a, 20)
	assert.Equal(t, "", strings.Trim(a, "0123456789abcdef"), a)
	assert.NotEqual(t, a, b)
}

// A dead-letter record is "lane|score|diedMs|reasonLen|reason" and the
// envelope; the reason may hold '|'.
func TestParseDead(t *testing.T) {
	env := (&envelope{ID: "job-7", CallerID: true, Priority: 2, EnqueuedMs: 1700000000000, Attempts: 3, Payload: []byte("doomed")}).encode()
	rec := func(header string, raw []byte) []byte { return append([]byte(header), raw...) }

	d, err := parseDead(rec("2|-2|1700000000500|9|boom|bang", env))
	require.NoError(t, err)
	assert.Equal(t, "boom|bang", d.Reason)
	assert.Equal(t, int64(1700000000500), d.DiedAt.UnixMilli())
	assert.Equal(t, "job-7", d.ID)
	assert.Equal(t, int64(2), d.Priority)
	assert.Equal(t, 3, d.Attempts)
	assert.Equal(t, []byte("doomed"), d.Payload)
	assert.Equal(t, int64(1700000000000), d.EnqueuedAt.UnixMilli())
	assert.Zero(t, d.Raw, "Raw is set only for an envelope that does not decode")

	d, err = parseDead(rec("0|0|1000|0|", env))
	require.NoError(t, err)
	assert.Equal(t, "", d.Reason)
	assert.Equal(t, "job-7", d.ID)

	// An envelope that does not decode: kept raw, with its id when readable.
	bad := bytes.Clone(env)
	bad[0] = 99
	d, err = parseDead(rec("0|0|1000|7|corrupt", bad))
	require.NoError(t, err)
	assert.Equal(t, "corrupt", d.Reason)
	assert.Equal(t, bad, d.Raw)
	assert.Equal(t, "job-7", d.ID)
	assert.Zero(t, d.Payload)
	d, err = parseDead(rec("0|0|1000|2|no", []byte("garbage!")))
	require.NoError(t, err)
	assert.Equal(t, []byte("garbage!"), d.Raw)
	assert.Equal(t, "", d.ID)

	for _, r := range []string{
		"",
		"0|0|1000|2",     // four fields
		"0|0|later|2|no", // died is not a number
		"0|0|1000|x|no",  // reason length is not a number
		"0|0|1000|-1|no", // negative reason length
		"0|0|1000|3|no",  // reason longer than the rest
	} {
		_, err := parseDead([]byte(r))
		assert.ErrorIs(t, err, ErrCorrupt, "%q", r)
	}
}

// A take leaves the message as it was in its lane (the attempts field counts
// finished deliveries, updated when a delivery ends), makes few calls, and
// re-arms the wake-up only when work remains. Before, every take rewrote each
// member to bump its attempts (a copy of every byte inside Redis: 1.7 s for a
// 100 MB message), made 8 calls for one message, and always re-armed.
func TestTakeLeavesMessagesAsTheyWere(t *testing.T) {
	addr := ownServer(t)
	c := ownPool(t, addr, 4)
	ctx := ctxT(t, 20*time.Second)
	for _, l := range threeLanes {
		t.Run(l.name, func(t *testing.T) {
			q := openQueue(t, c, Config{Layout: l.layout})
			_, err := q.Enqueue(ctx, []byte("only"), Priority(2), ID("only-1"))
			require.NoError(t, err)
			var before []string
			for _, lane := range sh(q).k.lanes {
				var got []string
				if sh(q).isRange() {
					require.NoError(t, c.Do(ctx, radix.Cmd(&got, "ZRANGE", lane, "0", "-1")))
				} else {
					require.NoError(t, c.Do(ctx, radix.Cmd(&got, "LRANGE", lane, "0", "-1")))
				}
				before = append(before, got...)
			}
			require.Len(t, before, 1)
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", sh(q).k.wake)))
			was := commandCalls(t, c)
			msgs, _, err := sh(q).take(ctx, sh(q).k.highFirst, 1, time.Minute)
			require.NoError(t, err)
			now := commandCalls(t, c)
			require.Len(t, msgs, 1)
			assert.Equal(t, 1, msgs[0].Attempts, "this delivery is the first")
			inner := 0
			for name, n := range now {
				if name != "evalsha" && name != "eval" && name != "info" {
					inner += n - was[name]
				}
			}
			t.Logf("calls inside the take: %d (%v)", inner, now)
			assert.LessOrEqual(t, inner, 5, "LMPOP, TIME, ZADD, HSET, EXISTS, and no wake-up: nothing else is ready")

			var rec string
			require.NoError(t, c.Do(ctx, radix.Cmd(&rec, "HGET", sh(q).k.inflight, msgs[0].token)))
			assert.True(t, strings.HasSuffix(rec, "|"+before[0]), "the in-flight record holds the member unchanged")
			var wake int
			require.NoError(t, c.Do(ctx, radix.Cmd(&wake, "EXISTS", sh(q).k.wake)))
			assert.Zero(t, wake, "no work remains: no wake-up")

			// The attempt counts when the delivery ends: a retry stores 1.
			require.NoError(t, msgs[0].Retry(ctx, time.Nanosecond, "again"))
			require.Eventually(t, func() bool {
				moved, _, _, err := sh(q).promote(ctx)
				return err == nil && moved == 1
			}, 5*time.Second, 10*time.Millisecond)
			peek, err := q.Peek(ctx, 10)
			require.NoError(t, err)
			require.Len(t, peek, 1)
			assert.Equal(t, 1, peek[0].Attempts)
			msgs, _, err = sh(q).take(ctx, sh(q).k.highFirst, 1, time.Minute)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			assert.Equal(t, 2, msgs[0].Attempts)
			require.NoError(t, msgs[0].Ack(ctx))
		})
	}
}

// A take that empties its lane re-arms the wake-up when a lane served after
// it still has work, so idle consumers are woken for it, and not otherwise.
func TestTakeWakesOthersOnlyForRemainingWork(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	for _, p := range []int64{2, 2, 0} {
		_, err := q.Enqueue(ctx, []byte("x"), Priority(p))
		require.NoError(t, err)
	}
	wake := func() int {
		var n int
		require.NoError(t, c.Do(ctx, radix.Cmd(&n, "EXISTS", sh(q).k.wake)))
		return n
	}
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", sh(q).k.wake)))
	msgs, _, err := sh(q).take(ctx, sh(q).k.highFirst, 2, time.Minute)
	require.NoError(t, err)
	require.Len(t, msgs, 2, "lane 2 holds two")
	assert.Equal(t, 1, wake(), "lane 0 still has one")
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", sh(q).k.wake)))
	msgs, _, err = sh(q).take(ctx, sh(q).k.highFirst, 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Zero(t, wake(), "nothing left")
}

// A take of several stops at a lane of the wrong type behind the lane it
// emptied, with what it took, instead of failing; the next take passes the
// broken lane by (it used to fail there: see TestWrongTypedLaneLeavesTheOthersWorking).
func TestTakeStopsAtAWrongTypedLaterLane(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	_, err := q.Enqueue(ctx, []byte("top"), Priority(2))
	require.NoError(t, err)
	corrupt(t, q, sh(q).k.lanes[1])
	msgs, _, err := sh(q).take(ctx, sh(q).k.highFirst, 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, "top", string(msgs[0].Payload))
	require.NoError(t, msgs[0].Ack(ctx))
	_, err = q.Enqueue(ctx, []byte("low"), Priority(0))
	require.NoError(t, err)
	msgs, _, err = sh(q).take(ctx, sh(q).k.highFirst, 5, time.Minute)
	require.NoError(t, err, "the first key holding something is the wrong-typed one: passed by")
	require.Len(t, msgs, 1)
	assert.Equal(t, "low", string(msgs[0].Payload))
}

// A take of several that empties a lane goes on to the next lanes, in
// priority order, so that one call serves several merged receives; it
// leaves no wake-up when it took everything.
func TestTakeFillsFromLaneAfterLane(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	for _, l := range []struct {
		name   string
		layout Layout
		prios  []int64
	}{{"Levels", Levels(4), []int64{0, 3, 1, 3, 0}}, {"Range", Range(0, 99, 4), []int64{0, 99, 30, 99, 0}}} {
		t.Run(l.name, func(t *testing.T) {
			q := openQueue(t, c, Config{Layout: l.layout})
			for i, p := range l.prios {
				_, err := q.Enqueue(ctx, []byte(strconv.Itoa(i)), Priority(p))
				require.NoError(t, err)
			}
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", sh(q).k.wake))) // set by the enqueues
			msgs, _, err := sh(q).take(ctx, sh(q).k.highFirst, 10, time.Minute)
			require.NoError(t, err)
			var got []string
			for _, m := range msgs {
				got = append(got, string(m.Payload))
			}
			assert.Equal(t, []string{"1", "3", "2", "0", "4"}, got, "highest first, FIFO within a priority")
			var wake int
			require.NoError(t, c.Do(ctx, radix.Cmd(&wake, "EXISTS", sh(q).k.wake)))
			assert.Zero(t, wake, "nothing left: no wake-up")
			for i, m := range msgs {
				require.NoError(t, m.Ack(ctx), "ack %d", i)
			}
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Zero(t, st.InFlight)
		})
	}
}
