package prioq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

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

// enqueueIDs enqueues one message per id, its payload the id.
func enqueueIDs(ctx context.Context, t *testing.T, q *Queue, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := q.Enqueue(ctx, []byte(id), ID(id))
		require.NoError(t, err)
	}
}

// errorLog returns an OnError that records what it is given, and a reader
// of the record.
func errorLog() (onError func(error), reported func() []string) {
	var mu sync.Mutex
	var errs []string
	return func(err error) {
			mu.Lock()
			errs = append(errs, err.Error())
			mu.Unlock()
		}, func() []string {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), errs...)
		}
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
	cons := newConsumer(t, q, ConsumerConfig{Lease: 300 * time.Millisecond, SweepInterval: 50 * time.Millisecond,
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
