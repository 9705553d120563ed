package prioq

import (
	"context"
	"errors"
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
