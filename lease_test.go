package prioq

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// An Ack after a successful AckBatch is a no-op, as after an Ack.
// Before the fix AckBatch did not record its outcome: ErrLeaseLost.
func TestAckAfterAckBatchIsANoOp(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{})
	enqueueIDs(ctx, t, q, "a", "b", "c")
	got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 3, time.Minute)
	require.NoError(t, err)
	for _, err := range AckBatch(ctx, got...) {
		require.NoError(t, err)
	}
	for _, m := range got {
		assert.NoError(t, m.Ack(ctx))
	}
}

func TestAckOnAtMostOnceMessage(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Mode: AtMostOnce})
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{})
	msg, err := cons.Receive(ctx)
	require.NoError(t, err)
	assert.ErrorIs(t, msg.Ack(ctx), ErrWrongMode)
	assert.ErrorIs(t, q.Pause(ctx), ErrWrongMode)
	assert.True(t, errors.Is(msg.Extend(ctx, time.Second), ErrWrongMode))
}

// Without a lease (an AtMostOnce message) Ack, Retry, Extend and AckBatch fail
// before any Redis call; bad arguments too.
func TestMessageCallsNeedALease(t *testing.T) {
	ctx := context.Background()
	m := &Message{MessageInfo: MessageInfo{ID: "amo"}}
	assert.ErrorIs(t, m.Ack(ctx), ErrWrongMode)
	assert.ErrorIs(t, m.Retry(ctx, time.Second, "x"), ErrWrongMode)
	assert.ErrorIs(t, m.Extend(ctx, time.Second), ErrWrongMode)
	errs := AckBatch(ctx, m)
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], ErrWrongMode)
	assert.Len(t, AckBatch(ctx), 0)

	// Leased, but from two queues: refused as a whole.
	a, b := leasedIn(t, ctx, openQueue(t, newClient(t), Config{})), leasedIn(t, ctx, openQueue(t, newClient(t), Config{}))
	errs = AckBatch(ctx, a, b)
	require.Len(t, errs, 2)
	assert.ErrorIs(t, errs[0], ErrInvalidOption)
	assert.ErrorIs(t, errs[1], ErrInvalidOption)
	errs = AckBatch(ctx, a, m)
	assert.ErrorIs(t, errs[0], ErrWrongMode)
	assert.ErrorIs(t, errs[1], ErrWrongMode)

	assert.ErrorIs(t, a.Extend(ctx, 0), ErrInvalidOption)
	assert.ErrorIs(t, a.Extend(ctx, -time.Second), ErrInvalidOption)
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

			dead := onlyDeadLetter(t, q)
			assert.Equal(t, id, dead.ID)
			assert.Equal(t, "boom 3", dead.Reason)
			assert.Equal(t, 3, dead.Attempts)
			assert.Equal(t, []byte("doomed"), dead.Payload)
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

// leasedIn enqueues a message to q and takes it with a lease.
func leasedIn(t *testing.T, ctx context.Context, q *Queue) *Message {
	t.Helper()
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, got, 1)
	return got[0]
}
