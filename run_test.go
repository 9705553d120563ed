package prioq

import (
	"context"
	"errors"
	"fmt"
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

func TestRunGracefulShutdownNoLeaks(t *testing.T) {
	testkit.NoLeaks(t, testkit.RadixRunner)
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

// Under Run without renewal (NoRenew) the handler's ctx ends with the
// lease, and Extend moves that end.
func TestHandlerContextFollowsTheLease(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{})
	extended, err := q.Enqueue(ctx, []byte("extends"), Priority(2))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("does not"), Priority(1))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{Lease: 400 * time.Millisecond, SweepInterval: time.Hour, NoRenew: true})
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

// callHandler turns a handler's panic into its error, so Run counts it as a
// failed attempt instead of crashing.
func TestCallHandler(t *testing.T) {
	ctx := context.Background()
	m := &Message{MessageInfo: MessageInfo{ID: "x"}}
	boom := errors.New("boom")
	assert.NoError(t, callHandler(ctx, m, func(context.Context, *Message) error { return nil }))
	assert.Equal(t, boom, callHandler(ctx, m, func(context.Context, *Message) error { return boom }))
	var err error
	require.NotPanics(t, func() {
		err = callHandler(ctx, m, func(context.Context, *Message) error { panic("handler bug") })
	})
	require.Error(t, err)
	assert.Equal(t, "prioq: handler panic: handler bug", err.Error())
	require.NotPanics(t, func() {
		err = callHandler(ctx, m, func(context.Context, *Message) error { panic(boom) })
	})
	require.Error(t, err)
	assert.Equal(t, "prioq: handler panic: boom", err.Error())
	// The handler gets the context and the message it was called with.
	type key struct{}
	hctx := context.WithValue(ctx, key{}, 1)
	assert.NoError(t, callHandler(hctx, m, func(c context.Context, got *Message) error {
		assert.Equal(t, 1, c.Value(key{}))
		assert.True(t, got == m)
		return nil
	}))
}

// runUntil runs cons with h until done is closed, then stops Run and waits
// for it.
func runUntil(t *testing.T, cons *Consumer, done <-chan struct{}, h Handler) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- cons.Run(ctx, h) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Error("the deliveries did not all finish in 15 s")
	}
	stop()
	<-ended
}

// A handler may end its delivery itself (Ack, or Retry) and then return: Run
// must not finish it a second time. Before, Run acked or retried again, the
// second call found the lease gone and Run reported an ErrLeaseLost for a
// delivery that went exactly as the handler asked.
func TestRunHandlerMayFinishItself(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, newClient(t), Config{Backoff: func(int) time.Duration { return time.Millisecond }})
	enqueueIDs(ctx, t, q, "self-acked", "self-retried")
	onError, reported := errorLog()
	cons := newConsumer(t, q, ConsumerConfig{OnError: onError})
	var acks sync.WaitGroup
	acks.Add(2) // self-acked once, self-retried on its second delivery
	done := make(chan struct{})
	go func() { acks.Wait(); close(done) }()
	runUntil(t, cons, done, func(ctx context.Context, m *Message) error {
		if m.ID == "self-retried" && m.Attempts == 1 {
			assert.NoError(t, m.Retry(ctx, time.Millisecond, "asked for"))
			return errors.New("told Run as well")
		}
		assert.NoError(t, m.Ack(ctx))
		assert.NoError(t, m.Ack(ctx), "a second Ack of an acked message is a no-op")
		acks.Done()
		return nil
	})
	time.Sleep(100 * time.Millisecond) // a second finishing, if any, reports now
	assert.Empty(t, reported(), "nothing went wrong")
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.InFlight+st.Ready+st.Delayed+st.Dead)
}

// Run tells AfterFinish callbacks what it did after the handler returned:
// not what the handler asked for, when that failed.
func TestAfterFinishReportsWhatRunDid(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, newClient(t), Config{MaxAttempts: 2, Backoff: func(int) time.Duration { return time.Millisecond }})
	ids := []string{"ok", "flaky", "skip", "late", "self-acked"}
	enqueueIDs(ctx, t, q, ids...)
	// "late" outlives its lease: the sweep gives it back, and the ack of its
	// first delivery fails.
	cons := newConsumer(t, q, ConsumerConfig{Lease: 300 * time.Millisecond, SweepInterval: 50 * time.Millisecond, NoRenew: true,
		OnError: func(error) {}})
	type finished struct {
		o   Outcome
		err error
	}
	var mu sync.Mutex
	got := map[string]finished{} // "id/attempt" -> what the callback saw
	want := 7                    // ok, flaky ×2, skip, late ×2, self-acked
	done := make(chan struct{})
	runUntil(t, cons, done, func(ctx context.Context, m *Message) error {
		key := fmt.Sprintf("%s/%d", m.ID, m.Attempts)
		calls := 0
		m.AfterFinish(func(o Outcome, err error) { calls++ })
		m.AfterFinish(func(o Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, 1, calls, "callbacks run in the order registered, once")
			got[key] = finished{o, err}
			if len(got) == want {
				close(done)
			}
		})
		switch {
		case m.ID == "flaky" && m.Attempts == 1:
			return errors.New("boom")
		case m.ID == "skip":
			return fmt.Errorf("hopeless: %w", ErrSkipRetry)
		case m.ID == "late" && m.Attempts == 1:
			<-ctx.Done()
			time.Sleep(300 * time.Millisecond) // the sweep gave the message back
		case m.ID == "self-acked":
			assert.NoError(t, m.Ack(ctx))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	outcomes := map[string]Outcome{}
	for k, f := range got {
		outcomes[k] = f.o
	}
	assert.Equal(t, map[string]Outcome{"ok/1": OutcomeAcked, "flaky/1": OutcomeRetried, "flaky/2": OutcomeAcked,
		"skip/1": OutcomeDeadLettered, "late/1": OutcomeUnfinished, "late/2": OutcomeAcked,
		"self-acked/1": OutcomeAcked}, outcomes)
	assert.ErrorIs(t, got["late/1"].err, ErrLeaseLost, "unfinished: the error of the ack that failed")
	assert.ErrorIs(t, got["skip/1"].err, ErrSkipRetry, "dead-lettered: the handler's error")
	assert.Equal(t, "boom", errString(got["flaky/1"].err))
	assert.NoError(t, got["ok/1"].err)
	assert.Equal(t, "unfinished", OutcomeUnfinished.String())
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// In AtMostOnce nothing is retried: a failing handler's delivery is
// OutcomeFailed, and a panicking AfterFinish callback does not stop Run or
// the callbacks after it.
func TestAfterFinishAtMostOnce(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, newClient(t), Config{Mode: AtMostOnce})
	enqueueIDs(ctx, t, q, "good", "bad")
	onError, reported := errorLog()
	cons := newConsumer(t, q, ConsumerConfig{OnError: onError})
	var mu sync.Mutex
	got := map[string]Outcome{}
	done := make(chan struct{})
	runUntil(t, cons, done, func(ctx context.Context, m *Message) error {
		m.AfterFinish(func(Outcome, error) { panic("callback bug") })
		m.AfterFinish(func(o Outcome, _ error) {
			mu.Lock()
			defer mu.Unlock()
			got[m.ID] = o
			if len(got) == 2 {
				close(done)
			}
		})
		if m.ID == "bad" {
			return errors.New("boom")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]Outcome{"good": OutcomeAcked, "bad": OutcomeFailed}, got)
	panics := 0
	for _, r := range reported() {
		if strings.Contains(r, "AfterFinish callback") && strings.Contains(r, "callback bug") {
			panics++
		}
	}
	assert.Equal(t, 2, panics, "each callback panic is reported")
}

// Once Run has cancelled a handler's context because its lease ran out,
// an Extend of that delivery fails with ErrLeaseExpired: the context cannot
// come back to life, so the handler must not be told the lease was extended.
// Before the fix the Extend returned nil while ctx stayed cancelled.
func TestExtendAfterTheLeaseContextEndedFails(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{})
	_, err := q.Enqueue(ctx, []byte("slow"))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{Lease: 300 * time.Millisecond, SweepInterval: time.Hour, NoPromoter: true, NoRenew: true})
	extendErr := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = cons.Run(rctx, func(hctx context.Context, m *Message) error {
			<-hctx.Done()
			err := m.Extend(context.Background(), 5*time.Second)
			extendErr <- err
			stop()
			return err
		})
	}()
	select {
	case err := <-extendErr:
		assert.ErrorIs(t, err, ErrLeaseExpired)
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
}
