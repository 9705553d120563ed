package prioq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Consumers that would hold every connection of their pool in blocking waits
// are refused at NewConsumer, and the ones accepted leave room for every other
// call. Before the check (issue 20), 12 consumers of a pool of 16 were all
// accepted, held all 16 connections (2 blocking waits each), and enqueues
// failed at their deadline.
func TestConsumersNeverStarveTheirPool(t *testing.T) {
	cl := ownPool(t, testAddr, 16)
	var accepted []*Queue
	refused := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	got := make(chan string, 100)
	for i := range 12 {
		q, err := Open(context.Background(), cl, fmt.Sprintf("%s-%d", queueName(t), i), Config{})
		require.NoError(t, err)
		// Waits far longer than the enqueues' deadline: a starved enqueue
		// cannot be rescued by a wait that ends.
		c, err := q.NewConsumer(ConsumerConfig{BlockTimeout: 30 * time.Second, PromoteWait: 30 * time.Second})
		if err != nil {
			require.ErrorContains(t, err, "pool", "the refusal says why")
			require.True(t, strings.Contains(err.Error(), "2 per consumer"), "the refusal says how to size the pool: %v", err)
			refused++
			continue
		}
		accepted = append(accepted, q)
		t.Cleanup(func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer ccancel()
			_ = c.Close(cctx)
		})
		wg.Add(1)
		go func() { // a consumer that always waits for work, as Run does
			defer wg.Done()
			for ctx.Err() == nil {
				m, err := c.Receive(ctx)
				if err == nil {
					got <- m.Queue()
					_ = m.Ack(ctx)
				}
			}
		}()
	}
	require.NotEmpty(t, accepted)
	require.True(t, refused > 0, "12 consumers x 2 blocking waits do not fit a pool of 16")
	time.Sleep(300 * time.Millisecond) // every accepted consumer is waiting now
	for _, q := range accepted {
		ectx, ecancel := context.WithTimeout(context.Background(), 5*time.Second) // CI runs modules side by side
		_, err := q.Enqueue(ectx, []byte("x"))
		ecancel()
		require.NoError(t, err, "an enqueue beside the waiting consumers")
	}
	seen := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for len(seen) < len(accepted) {
		select {
		case name := <-got:
			seen[name] = true
		case <-deadline:
			t.Fatalf("%d of %d queues' messages delivered", len(seen), len(accepted))
		}
	}
	cancel()
	wg.Wait()
}

// Opens and Stats made at the same time all return quickly. Open read the
// server's maxmemory-policy on a connection taken out of the pool
// (WithConn), and radix v4.1.4 wakes only one call waiting for a shared
// connection per connection put back: calls that came while all were out
// waited until their deadline (8 of 50 Stats, 3 s each, on the code before).
func TestConcurrentOpensAndStatsDoNotWait(t *testing.T) {
	cl := ownPool(t, testAddr, 8)
	base := queueName(t)
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				q, err := Open(ctx, cl, fmt.Sprintf("%s-%d-%d", base, round, i), Config{})
				if err == nil {
					_, err = q.Stats(ctx)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
}

// NewConsumer's check borrows the pool's free connections for a moment;
// calls made meanwhile by others are not left waiting afterwards.
func TestPoolCheckDoesNotStallOtherCalls(t *testing.T) {
	cl := ownPool(t, testAddr, 8)
	q, err := Open(context.Background(), cl, queueName(t), Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []error
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := q.Stats(cctx)
				ccancel()
				if err != nil && ctx.Err() == nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
			}
		}()
	}
	for range 6 {
		c, err := q.NewConsumer(ConsumerConfig{})
		if err == nil {
			t.Cleanup(func() { _ = c.Close(context.Background()) })
		}
	}
	time.Sleep(2500 * time.Millisecond)
	cancel()
	wg.Wait()
	require.Empty(t, failed, "calls made during the pool checks")
}

// holdConns takes n connections out of cl's pool and holds them for d.
func holdConns(cl radix.Client, n int, d time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cl.Do(context.Background(), radix.WithConn("x", func(context.Context, radix.Conn) error {
				time.Sleep(d)
				return nil
			}))
		}()
	}
	return &wg
}

// A refusal caused by connections that the program held only for a moment
// is remembered for refusalKept only. Before (found in review), it was
// remembered until a consumer of the client closed: with no consumer yet,
// for ever, and a pool that was entirely free again refused.
func TestPoolRefusalExpires(t *testing.T) {
	cl := ownPool(t, testAddr, 4)
	q, err := Open(context.Background(), cl, queueName(t), Config{})
	require.NoError(t, err)
	wg := holdConns(cl, 2, 800*time.Millisecond) // a burst of other work
	time.Sleep(50 * time.Millisecond)
	_, err = q.NewConsumer(ConsumerConfig{})
	require.ErrorIs(t, err, ErrPoolTooSmall, "refused while 2 of 4 are out (expected)")
	wg.Wait()
	time.Sleep(refusalKept + 100*time.Millisecond)
	// The pool is free: 4 connections, a consumer needs 2 + 1.
	c, err := q.NewConsumer(ConsumerConfig{})
	if c != nil {
		_ = c.Close(context.Background())
	}
	require.NoError(t, err, "pool of 4 entirely free, consumer needs 3")
}

// A MultiConsumer's listener holds a connection for good and counts as
// waiting, so no check tries to borrow it. Before (found in review), a pool
// of 3 (two listeners + 1 for other calls) refused a second MultiConsumer.
func TestListenerIsCountedOnce(t *testing.T) {
	cl := ownPool(t, testAddr, 3)
	qs := openMany(t, cl, queueName(t), 2, Config{})
	newMulti(t, cl, MultiConfig{Queues: names(qs[:1])})
	time.Sleep(300 * time.Millisecond) // its listener is subscribed
	mc, err := NewMultiConsumer(context.Background(), cl, MultiConfig{Queues: names(qs[1:])})
	if mc != nil {
		_ = mc.Close(context.Background())
	}
	require.NoError(t, err, "2 listeners + 1 for other calls fit a pool of 3")
}

// A MultiConsumer reserves a node's listener connection when a queue on that
// node is first served, also by Add or a rescan: with no room, Add fails with
// ErrPoolTooSmall and the pool keeps one connection for other calls. Before
// (found in review), a MultiConsumer whose Pattern matched nothing reserved
// nothing, the listener Add started took the last connection, and an
// enqueue failed at its deadline.
func TestMultiConsumerAddReservesItsConnection(t *testing.T) {
	cl := ownPool(t, testAddr, 3)
	base := queueName(t)
	q, err := Open(context.Background(), cl, base+"-single", Config{})
	require.NoError(t, err)
	c := newConsumer(t, q, ConsumerConfig{BlockTimeout: 5 * time.Second}) // 2 blocking + 1 = 3: fits exactly
	mc, err := NewMultiConsumer(context.Background(), cl, MultiConfig{Pattern: base + "-m-*"})
	require.NoError(t, err, "accepted: it reserves nothing")
	t.Cleanup(func() { _ = mc.Close(context.Background()) })
	mq, err := Open(context.Background(), cl, base+"-m-1", Config{})
	require.NoError(t, err)
	require.ErrorIs(t, mc.Add(context.Background(), mq.Name()), ErrPoolTooSmall, "no room for its listener")
	require.Empty(t, mc.Queues())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			m, err := c.Receive(ctx)
			if err == nil {
				_ = m.Ack(ctx)
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // consumer waits on 2, listener holds 1
	ectx, ecancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ecancel()
	_, err = q.Enqueue(ectx, []byte("x"))
	require.False(t, errors.Is(err, context.DeadlineExceeded), "no connection left for an enqueue: %v", err)
	require.NoError(t, err)
}

// Issue 29, item 21: the README's example client, then what a user does
// next: a second queue, each with a consumer running Run, and a third
// consumer (a second worker pool on the first queue). With the example's
// radix.PoolConfig{} (Size 4) the second consumer was refused and the third
// was told "the pool gave -1 of 4"; the example's pool now has room for 7
// consumers of one-shard queues (2 blocking connections each, plus 1).
func TestREADMEPoolServesTwoQueuesAndAThirdConsumer(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	// As in the README and example_test.go's Example.
	client, err := radix.PoolConfig{Size: 16}.New(ctx, "tcp", testAddr)
	require.NoError(t, err)
	defer client.Close()

	base := queueName(t)
	emails, err := Open(ctx, client, base+"-emails", Config{Layout: Levels(3)})
	require.NoError(t, err)
	sms, err := Open(ctx, client, base+"-sms", Config{Layout: Levels(3)})
	require.NoError(t, err)
	got := make(chan string, 100)
	handler := func(_ context.Context, m *Message) error { got <- m.Queue(); return nil }
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, q := range []*Queue{emails, sms, emails} {
		c, err := q.NewConsumer(ConsumerConfig{})
		require.NoError(t, err, "consumer %d", i+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Run(rctx, handler)
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Close(cctx)
		}()
	}
	time.Sleep(200 * time.Millisecond) // every consumer waits for work
	want := map[string]int{}
	for i := range 10 {
		for _, q := range []*Queue{emails, sms} {
			ectx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := q.Enqueue(ectx, []byte(fmt.Sprint(i)), Priority(int64(i%3)))
			cancel()
			require.NoError(t, err, "an enqueue beside the three waiting consumers")
			want[q.Name()]++
		}
	}
	seen := map[string]int{}
	for n := 0; n < 20; n++ {
		select {
		case name := <-got:
			seen[name]++
		case <-time.After(5 * time.Second):
			t.Fatalf("handled %v of %v", seen, want)
		}
	}
	assert.Equal(t, want, seen)
	stop()
	wg.Wait()
}

// A pool that really is too small is refused with a message that says how
// large it must be, in numbers that are right: a pool of that size accepts
// the consumer. The refusal remembered for a moment (refusalKept) says the
// same, not "the pool gave -1 of 4" as before.
func TestPoolTooSmallSaysHowLargeItMustBe(t *testing.T) {
	for _, tc := range []struct {
		name      string
		size      int // a pool too small for the last consumer
		consumers int // accepted before it
		least     int // the size the message names
		others    string
	}{
		{"SecondOfFour", 4, 1, 5, "the other consumer of this client holds 2"},
		{"ThirdOfSix", 6, 2, 7, "the 2 other consumers of this client hold 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := ownPool(t, testAddr, tc.size)
			q, err := Open(context.Background(), cl, queueName(t), Config{})
			require.NoError(t, err)
			for range tc.consumers {
				c, err := q.NewConsumer(ConsumerConfig{})
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close(context.Background()) })
			}
			time.Sleep(100 * time.Millisecond) // their promoters wait
			for attempt, how := range []string{"checked", "remembered"} {
				_, err = q.NewConsumer(ConsumerConfig{})
				require.ErrorIs(t, err, ErrPoolTooSmall, how)
				msg := err.Error()
				t.Logf("%s: %s", how, msg)
				for _, part := range []string{
					fmt.Sprintf("a consumer of %q needs 2 blocking connections", q.Name()),
					tc.others,
					fmt.Sprintf("the pool needs %d connections or more", tc.least),
					fmt.Sprintf("Give it %d or more (radix.PoolConfig{Size: %d})", tc.least, tc.least),
					"ConsumerConfig.Concurrency",
					"2 per consumer",
				} {
					assert.Contains(t, msg, part, how)
				}
				assert.False(t, strings.Contains(msg, "-1"), how, "no -1 in:", msg)
				if attempt == 1 {
					assert.Contains(t, msg, "in a check", "says the refusal is remembered")
				}
			}
			// The size it names is enough.
			big := ownPool(t, testAddr, tc.least)
			qb, err := Open(context.Background(), big, q.Name(), Config{})
			require.NoError(t, err)
			for i := range tc.consumers + 1 {
				c, err := qb.NewConsumer(ConsumerConfig{})
				require.NoError(t, err, "consumer %d of a pool of %d", i+1, tc.least)
				t.Cleanup(func() { _ = c.Close(context.Background()) })
				time.Sleep(50 * time.Millisecond) // its promoter waits, as above
			}
		})
	}
}
