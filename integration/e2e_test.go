package integration

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// Both layouts × both delivery modes in the container: a producer process and
// producer goroutines, a consumer process and consumer goroutines, delayed
// messages mixed in. Every enqueued message is delivered; in AtMostOnce mode
// exactly once, in AtLeastOnce mode at least once and acked.
func TestEndToEndInDocker(t *testing.T) {
	redis := sharedRedis(t)
	for _, layout := range []string{"levels", "range"} {
		for _, mode := range []string{"alo", "amo"} {
			t.Run(layout+"/"+mode, func(t *testing.T) {
				leakCheck(t)
				spec := queueSpec{queueName(t), layout, mode}
				cl := newPool(t, redis.Addr, 32)
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				q, err := prioq.Open(ctx, cl, spec.name, spec.config())
				require.NoError(t, err)

				const perProducer, goroutines = 1500, 3
				var mu sync.Mutex
				seen := map[string]int{}
				expected := map[string]bool{}
				record := func(id string) { mu.Lock(); seen[id]++; mu.Unlock() }

				consumer := startHelper(t, "consume", redis.Addr, spec, "H_WORKERS=4")
				consumer.ready(t) // (it took none of 6,000 when the work began before it ran)
				producer := startHelper(t, "produce", redis.Addr, spec, "H_N="+strconv.Itoa(perProducer), "H_PREFIX=proc-")
				runCtx, stop := context.WithCancel(ctx)
				var wg sync.WaitGroup
				for i := 0; i < 3; i++ {
					cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 4, NoPromoter: i > 0})
					require.NoError(t, err)
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer cons.Close(context.Background())
						_ = cons.Run(runCtx, func(ctx context.Context, m *prioq.Message) error {
							record(m.ID)
							return nil
						})
					}()
				}
				var pwg sync.WaitGroup
				for g := 0; g < goroutines; g++ {
					pwg.Add(1)
					go func(g int) {
						defer pwg.Done()
						r := newRand(t, g)
						for i := 0; i < perProducer; i++ {
							id := "go" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
							opts := []prioq.Option{prioq.ID(id), prioq.Priority(spec.priority(r))}
							if r.IntN(5) == 0 {
								opts = append(opts, prioq.Delay(time.Duration(r.IntN(300))*time.Millisecond))
							}
							if _, err := q.Enqueue(ctx, []byte("x"), opts...); assert.NoError(t, err) {
								mu.Lock()
								expected[id] = true
								mu.Unlock()
							}
						}
					}(g)
				}
				pwg.Wait()
				producer.wait(t, time.Minute)
				for _, id := range producer.get("E") {
					expected[id] = true
				}
				require.Len(t, expected, (goroutines+1)*perProducer)
				require.Eventually(t, func() bool {
					st, err := q.Stats(ctx)
					return err == nil && st.Ready+st.Delayed+st.InFlight == 0
				}, time.Minute, 20*time.Millisecond)
				time.Sleep(100 * time.Millisecond) // the last handlers finish
				stop()
				wg.Wait()
				consumer.kill()
				for _, id := range consumer.get("S") {
					record(id)
				}
				var lost, dup int
				for id := range expected {
					switch n := seen[id]; {
					case n == 0:
						lost++
					case n > 1:
						dup++
					}
				}
				t.Logf("%d enqueued, %d lost, %d delivered more than once, %d by the consumer process",
					len(expected), lost, dup, len(consumer.get("S")))
				assert.Zero(t, lost)
				if mode == "amo" {
					assert.Zero(t, dup, "AtMostOnce delivers each message at most once")
				}
				assert.NotEmpty(t, consumer.get("S"), "the consumer process took part")
			})
		}
	}
}
