package prioq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Close waits for a pop still running (its caller gave up) and returns only
// once what the pop took is back in the lane: an AtMostOnce message exists
// nowhere else, and a caller may close the pool as soon as Close returns.
func TestCloseReturnsAfterThePopGaveBack(t *testing.T) {
	c := newClient(t)
	for i := 0; i < 30; i++ {
		ctx := ctxT(t, 10*time.Second)
		q := openQueue(t, c, Config{Mode: AtMostOnce})
		cons, err := q.NewConsumer(ConsumerConfig{NoPromoter: true, BlockTimeout: 5 * time.Second})
		require.NoError(t, err)
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err = cons.Receive(short) // gives up; its pop goes on
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		closed := make(chan error, 1)
		go func() { closed <- cons.Close(ctx) }()
		require.Eventually(t, func() bool { // Close has begun: it waits for the pop
			cons.fetcher.mu.Lock()
			defer cons.fetcher.mu.Unlock()
			return cons.fetcher.closed
		}, 5*time.Second, time.Millisecond)
		_, err = q.Enqueue(ctx, []byte(fmt.Sprint(i)))
		require.NoError(t, err)
		require.NoError(t, <-closed)
		var n int
		require.NoError(t, c.Do(ctx, radix.Cmd(&n, "LLEN", sh(q).k.lanes[0])))
		require.Equal(t, 1, n, "run %d: Close returned before the popped message was back", i)
	}
}

// Close gives back messages fetched but not handed out in their order.
func TestPutBackKeepsOrder(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		for _, l := range someLayouts {
			t.Run(m.name+"/"+l.name, func(t *testing.T) {
				ctx := ctxT(t, 10*time.Second)
				q := openQueue(t, c, Config{Layout: l.layout, Mode: m.mode})
				var want []string
				for i := 0; i < 5; i++ {
					id, err := q.Enqueue(ctx, []byte("x"))
					require.NoError(t, err)
					want = append(want, id)
				}
				cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
				held, err := cons.ReceiveBatch(ctx, 5)
				require.NoError(t, err)
				require.Len(t, held, 5)
				require.NoError(t, cons.fetcher.giveBack(ctx, held))
				peek, err := q.Peek(ctx, 10)
				require.NoError(t, err)
				var got []string
				for _, p := range peek {
					got = append(got, p.ID)
				}
				assert.Equal(t, want, got)
			})
		}
	}
}

func TestCancelledReceiveLosesNothing(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			q := openQueue(t, c, Config{Mode: m.mode})
			cons, err := q.NewConsumer(ConsumerConfig{BlockTimeout: 500 * time.Millisecond})
			require.NoError(t, err)
			// Receive on an empty queue gives up with the context...
			short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			start := time.Now()
			_, err = cons.Receive(short)
			cancel()
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Less(t, time.Since(start), 400*time.Millisecond, "Receive must return promptly on ctx done")
			// ...while its fetch may still be running; a message arriving now is
			// held for the next Receive or put back by Close, never dropped.
			ctx := ctxT(t, 10*time.Second)
			id, err := q.Enqueue(ctx, []byte("x"))
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond)
			require.NoError(t, cons.Close(ctx))
			_, err = cons.Receive(ctx)
			assert.ErrorIs(t, err, ErrClosed)

			cons2 := newConsumer(t, q, ConsumerConfig{})
			msg, err := cons2.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, id, msg.ID)
			if m.mode == AtLeastOnce {
				assert.Equal(t, 1, msg.Attempts, "a message given back on Close does not count an attempt")
				require.NoError(t, msg.Ack(ctx))
			}
		})
	}
}

// Close with a ctx that ends before the AtMostOnce pop in progress: Close
// returns at once, and a message the pop takes afterwards is given back to
// its lane, not stranded.
func TestCloseBeforeAtMostOncePopEndsLosesNothing(t *testing.T) {
	c := newClient(t)
	q := openQueue(t, c, Config{Mode: AtMostOnce})
	cons, err := q.NewConsumer(ConsumerConfig{BlockTimeout: 2 * time.Second, NoPromoter: true})
	require.NoError(t, err)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = cons.Receive(short) // starts a pop that blocks for up to 2 s
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	closeCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	err = cons.Close(closeCtx)
	cancel()
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second)
	ctx := ctxT(t, 10*time.Second)
	id, err := q.Enqueue(ctx, []byte("arrives while the old pop still waits"))
	require.NoError(t, err)
	// The old pop takes it and, the consumer being closed, puts it back.
	require.Eventually(t, func() bool {
		st, err := q.Stats(ctx)
		return err == nil && st.Ready == 1
	}, 5*time.Second, 10*time.Millisecond)
	cons2 := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	m, err := cons2.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, id, m.ID)
}

func TestConsumerConfigWithDefaults(t *testing.T) {
	alo := ConsumerConfig{}.withDefaults(AtLeastOnce)
	assert.Equal(t, 1, alo.Concurrency)
	assert.Equal(t, 30*time.Second, alo.Lease)
	assert.Equal(t, 5*time.Second, alo.BlockTimeout)
	assert.Equal(t, 30*time.Second, alo.PromoteWait)
	assert.Equal(t, 10*time.Second, alo.SweepInterval, "Lease/2 is longer")
	assert.Equal(t, 30*time.Second, alo.GracePeriod)
	assert.Equal(t, 500*time.Millisecond, alo.RetryInterval)
	assert.Equal(t, 2*time.Second, ConsumerConfig{}.withDefaults(AtMostOnce).BlockTimeout,
		"Close of an AtMostOnce consumer waits for its pop: a shorter block")

	short := ConsumerConfig{Lease: 4 * time.Second}.withDefaults(AtLeastOnce)
	assert.Equal(t, 2*time.Second, short.SweepInterval, "half the lease when that is shorter")
	set := ConsumerConfig{Concurrency: 3, Lease: 4 * time.Second, SweepInterval: 20 * time.Second,
		BlockTimeout: time.Second, GracePeriod: -1}.withDefaults(AtMostOnce)
	assert.Equal(t, 3, set.Concurrency)
	assert.Equal(t, 20*time.Second, set.SweepInterval, "a set interval is kept")
	assert.Equal(t, time.Second, set.BlockTimeout)
	assert.Equal(t, 30*time.Second, set.GracePeriod)
}

// jitter spreads a sweep interval over [0.75d, 1.25d).
func TestJitter(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 3} {
		assert.Equal(t, d, jitter(d), "below 4 ns: unchanged")
	}
	for _, d := range []time.Duration{4, time.Second} {
		var low, high int
		for i := 0; i < 200; i++ {
			j := jitter(d)
			if j < d*3/4 || j >= d*5/4 {
				t.Fatalf("jitter(%v) = %v, want [%v, %v)", d, j, d*3/4, d*5/4)
			}
			if j < d {
				low++
			} else {
				high++
			}
		}
		assert.NotZero(t, low, "jitter(%v) never below d", d)
		assert.NotZero(t, high, "jitter(%v) never at or above d", d)
	}
}

// Weights are checked before the consumer starts anything.
func TestNewConsumerRejectsBadWeights(t *testing.T) {
	q := pureQueue(Config{Layout: Levels(3)})
	for _, w := range [][]int{{}, {1, 2}, {1, 2, 3, 4}, {1, -1, 1}} {
		_, err := q.NewConsumer(ConsumerConfig{Weights: w})
		assert.ErrorIs(t, err, ErrInvalidOption, "weights %v", w)
	}
}
