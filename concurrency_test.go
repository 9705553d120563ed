package prioq

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Eight consumers, each with its own fetch and blocking connection, share
// 20,000 messages enqueued while they run: each message arrives exactly once.
func TestConcurrentConsumersExactlyOnce(t *testing.T) {
	const total, consumers = 20000, 8
	c := newClient(t)
	for _, m := range bothModes {
		for _, l := range someLayouts {
			t.Run(m.name+"/"+l.name, func(t *testing.T) {
				ctx := ctxT(t, 2*time.Minute)
				q := openQueue(t, c, Config{Layout: l.layout, Mode: m.mode})
				prio := priorityGen(newRand(t), l.layout)

				var mu sync.Mutex
				seen := make(map[string]int, total)
				var wg sync.WaitGroup
				runCtx, stop := context.WithCancel(ctx)
				defer stop()
				errs := make(chan error, consumers)
				for i := 0; i < consumers; i++ {
					cons := newConsumer(t, q, ConsumerConfig{BlockTimeout: 200 * time.Millisecond})
					wg.Add(1)
					go func(batch int) {
						defer wg.Done()
						for {
							msgs, err := cons.ReceiveBatch(runCtx, batch)
							if err != nil {
								if runCtx.Err() == nil {
									errs <- err
								}
								return
							}
							if m.mode == AtLeastOnce {
								for _, err := range AckBatch(ctx, msgs...) {
									if err != nil {
										errs <- err
										return
									}
								}
							}
							mu.Lock()
							for _, msg := range msgs {
								seen[msg.ID]++
							}
							mu.Unlock()
						}
					}(1 + i%3) // single takes and small batches side by side
				}

				sent := make([]string, 0, total)
				for len(sent) < total {
					items := make([]EnqueueItem, 100)
					for i := range items {
						items[i] = EnqueueItem{Payload: []byte(fmt.Sprint(len(sent) + i)), Options: []Option{Priority(prio())}}
					}
					res, err := q.EnqueueBatch(ctx, items)
					require.NoError(t, err)
					for _, r := range res {
						require.NoError(t, r.Err)
						sent = append(sent, r.ID)
					}
				}
				require.Eventually(t, func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(seen) >= total
				}, time.Minute, 20*time.Millisecond)
				stop()
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				var dup int
				for _, id := range sent {
					if seen[id] != 1 {
						dup++
					}
				}
				assert.Zero(t, dup, "messages not delivered exactly once")
				assert.Len(t, seen, total)
				st, err := q.Stats(ctx)
				require.NoError(t, err)
				assert.Zero(t, st.Ready+st.Delayed+st.InFlight)
			})
		}
	}
}
