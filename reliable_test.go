package prioq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
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
			assert.Equal(t, 1, n)
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
			top := q.k.lanes[len(q.k.lanes)-1]
			if q.isRange() {
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

func TestHandlerPanicIsAFailedAttempt(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{Backoff: func(int) time.Duration { return time.Millisecond }})
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{})
	acked := make(chan int, 1)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = cons.Run(runCtx, func(ctx context.Context, m *Message) error {
			if m.Attempts == 1 {
				panic("handler bug")
			}
			acked <- m.Attempts
			return nil
		})
	}()
	select {
	case a := <-acked:
		assert.Equal(t, 2, a)
	case <-time.After(10 * time.Second):
		t.Fatal("message not retried after a panic")
	}
}

func TestWeightedOrderDoesNotStarve(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(2)})
	items := make([]Item, 0, 800)
	for i := 0; i < 400; i++ {
		items = append(items, Item{Payload: []byte("lo"), Options: []Option{Priority(0)}},
			Item{Payload: []byte("hi"), Options: []Option{Priority(1)}})
	}
	_, err := q.EnqueueBatch(ctx, items)
	require.NoError(t, err)
	_, err = q.NewConsumer(ConsumerConfig{Weights: []int{1}})
	assert.ErrorIs(t, err, ErrInvalidOption)
	cons := newConsumer(t, q, ConsumerConfig{Weights: []int{1, 3}})
	low := 0
	for i := 0; i < 200; i++ {
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		if m.Priority == 0 {
			low++
		}
		require.NoError(t, m.Ack(ctx))
	}
	// Expected 25%; strict order would give 0.
	assert.Greater(t, low, 20)
	assert.Less(t, low, 90)
}

func TestRunGracefulShutdownNoLeaks(t *testing.T) {
	defer goleak.VerifyNone(t, append(leakOptions, goleak.IgnoreCurrent())...)
	// A pool of its own, closed before the check: radix replaces connections
	// closed by cancelled blocking calls, and those belong to the pool.
	c, err := radix.PoolConfig{Size: 8}.New(context.Background(), "tcp", testAddr)
	require.NoError(t, err)
	defer c.Close()
	for _, m := range bothModes {
		ctx := ctxT(t, 30*time.Second)
		q := openQueue(t, c, Config{Mode: m.mode})
		for i := 0; i < 20; i++ {
			_, err := q.Enqueue(ctx, []byte("x"), Delay(time.Duration(i)*10*time.Millisecond))
			require.NoError(t, err)
		}
		cons, err := q.NewConsumer(ConsumerConfig{Concurrency: 4, BlockTimeout: 300 * time.Millisecond})
		require.NoError(t, err)
		var started, finished atomic.Int32
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error)
		go func() {
			done <- cons.Run(runCtx, func(ctx context.Context, msg *Message) error {
				started.Add(1)
				time.Sleep(150 * time.Millisecond)
				finished.Add(1)
				return nil
			})
		}()
		require.Eventually(t, func() bool { return started.Load() >= 4 }, 5*time.Second, 5*time.Millisecond)
		stop()
		require.ErrorIs(t, <-done, context.Canceled)
		assert.Equal(t, started.Load(), finished.Load(), "%s: Run returned before its handlers finished", m.name)
		require.NoError(t, cons.Close(ctx))
		if m.mode == AtLeastOnce {
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Zero(t, st.InFlight, "every handler that finished was acked")
		}
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
	_ = cons.Run(ctx, func(ctx context.Context, m *Message) error {
		if err := cl.Do(ctx, radix.Cmd(nil, "HINCRBY", counts, m.ID, "1")); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
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
	counts := q.k.meta + ":test-counts" // same hash tag, cleaned below
	t.Cleanup(func() { _ = c.Do(context.Background(), radix.Cmd(nil, "DEL", counts)) })

	sent := make([]string, 0, total)
	for len(sent) < total {
		items := make([]Item, 500)
		for i := range items {
			items[i] = Item{Payload: []byte("work"), Options: []Option{Priority(int64(i % 3))}}
		}
		res, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
		for _, r := range res {
			sent = append(sent, r.ID)
		}
	}
	spawn := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=1", "PRIOQ_TEST_ADDR="+testAddr,
			"PRIOQ_TEST_QUEUE="+q.Name(), "PRIOQ_TEST_COUNTS="+counts)
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
		time.Sleep(time.Duration(150+rand.IntN(250)) * time.Millisecond)
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
	assert.LessOrEqual(t, dup, kills*(16+maxAckBatch))
}

// Under Run the handler's ctx ends with the lease, and Extend moves that end.
func TestHandlerContextFollowsTheLease(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{})
	extended, err := q.Enqueue(ctx, []byte("extends"), Priority(2))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("does not"), Priority(1))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{Lease: 400 * time.Millisecond, SweepInterval: time.Hour})
	type outcome struct {
		id        string
		aliveLate bool  // ctx still alive 700 ms in
		cause     error // why it ended, if it did
	}
	got := make(chan outcome, 2)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = cons.Run(runCtx, func(hctx context.Context, m *Message) error {
			if m.ID == extended {
				if err := m.Extend(hctx, 2*time.Second); err != nil {
					return err
				}
			}
			select {
			case <-hctx.Done():
				got <- outcome{m.ID, false, context.Cause(hctx)}
				return hctx.Err()
			case <-time.After(700 * time.Millisecond):
				got <- outcome{m.ID, true, nil}
				return nil
			}
		})
	}()
	for i := 0; i < 2; i++ {
		select {
		case o := <-got:
			if o.id == extended {
				assert.True(t, o.aliveLate, "Extend must move the handler's deadline")
			} else {
				assert.False(t, o.aliveLate, "the handler ctx must end with the lease")
				assert.ErrorIs(t, o.cause, ErrLeaseExpired)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("handler did not finish")
		}
	}
}
