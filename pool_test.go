package prioq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
		c, err := q.NewConsumer(ConsumerConfig{})
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
		ectx, ecancel := context.WithTimeout(context.Background(), 2*time.Second)
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
