package prioq

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// receiver is what the rate tests receive from: a Consumer or a
// MultiConsumer.
type receiver interface {
	Receive(ctx context.Context) (*Message, error)
}

// drainTimes receives and acks n messages with workers goroutines per
// receiver and returns each delivery's take time (server clock) and group,
// in delivery order.
func drainTimes(t *testing.T, ctx context.Context, rs []receiver, n, workers int) (times []time.Time, groups []string) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed error
	for i := range workers * len(rs) {
		r := rs[i%len(rs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := len(times) >= n || failed != nil
				mu.Unlock()
				if done {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				m, err := r.Receive(rctx)
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
						return
					}
					continue
				}
				mu.Lock()
				times = append(times, m.TakenAt())
				groups = append(groups, m.Group)
				mu.Unlock()
				if err := m.Ack(ctx); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, failed)
	return times, groups
}

// maxInWindow is the most take times in any window [t, t+per) (each window
// starting at a take: the fullest window always does).
func maxInWindow(times []time.Time, per time.Duration) int {
	ts := slices.Clone(times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j].Before(ts[i].Add(per)) {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// A queue's rate limit holds in every window, wherever it starts, across
// consumers, for Consumers and a MultiConsumer; the consumers wait for the
// next take's time instead of polling (takes stay near one per message),
// and the queue still moves at the limit. Failed on the code before: there
// was no rate limit (60 messages went in one burst).
func TestQueueRateLimitHoldsInEveryWindow(t *testing.T) {
	const limit, per, total = 10, 200 * time.Millisecond, 60
	for _, l := range groupLayouts[:3] {
		for _, multi := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/multi=%v", l.name, multi), func(t *testing.T) {
				c := newClient(t)
				ctx := ctxT(t, 30*time.Second)
				q := openQueue(t, c, Config{Layout: l.layout})
				require.NoError(t, q.SetRateLimit(ctx, Rate{N: limit, Per: per}))
				got, err := q.RateLimit(ctx)
				require.NoError(t, err)
				assert.Equal(t, Rate{N: limit, Per: per}, got)
				for i := range total {
					opts := []Option{Priority(l.prio)}
					if i%2 == 0 {
						opts = append(opts, Group(fmt.Sprint("g", i%3))) // grouped or not, all count
					}
					_, err := q.Enqueue(ctx, []byte("m"), opts...)
					require.NoError(t, err)
				}
				var rs []receiver
				if multi {
					rs = []receiver{newMulti(t, c, MultiConfig{Queues: []string{q.Name()}})}
				} else {
					// Two consumers: the limit is the queue's.
					rs = []receiver{newConsumer(t, q, ConsumerConfig{}), newConsumer(t, q, ConsumerConfig{})}
				}
				was := commandCalls(t, c)
				start := time.Now()
				times, _ := drainTimes(t, ctx, rs, total, 2)
				elapsed := time.Since(start)
				calls := commandCalls(t, c)
				scripts := calls["evalsha"] - was["evalsha"] + calls["eval"] - was["eval"]
				most := maxInWindow(times, per)
				t.Logf("%d messages in %v; most in a window of %v: %d; scripts run: %d", len(times), elapsed, per, most, scripts)
				assert.LessOrEqual(t, most, limit, "no window holds more than the limit")
				// 60 at 10 per 200 ms: the first 10 at once, then 5 more windows.
				assert.GreaterOrEqual(t, elapsed, time.Duration(total/limit-1)*per-20*time.Millisecond, "the limit held the queue back")
				assert.Less(t, elapsed, 5*time.Second, "the consumers took each message when its time came")
				// Each message is one take and one ack; a consumer at the limit
				// takes once more per window it waits out, not once per poll.
				assert.Less(t, scripts, 3*total, "no polling")
			})
		}
	}
}

// A group at its rate limit is skipped, not waited for: the other groups
// are served meanwhile, and the limited group comes back when its next
// take's time comes (put back by a promoter, which its park wakes: no
// consumer polls), its windows never above the limit. Failed on the code
// before: there was no rate limit.
func TestGroupRateLimitSkipsTheGroupNotTheQueue(t *testing.T) {
	const limit, per, each = 3, 300 * time.Millisecond, 12
	for _, l := range groupLayouts {
		t.Run(l.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			require.NoError(t, q.SetGroupLimit(ctx, "slow", GroupLimit{Rate: Rate{N: limit, Per: per}}))
			for i := range each {
				for _, g := range []string{"slow", "fast"} {
					_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(l.prio), Group(g))
					require.NoError(t, err)
				}
			}
			cons := newConsumer(t, q, ConsumerConfig{})
			// The first turns, then the slow group parks at its limit.
			var order []string
			var all []time.Time // the slow group's take times
			for range 2*limit + (each - limit) {
				m, err := cons.Receive(ctx)
				require.NoError(t, err)
				order = append(order, m.Group)
				if m.Group == "slow" {
					all = append(all, m.TakenAt())
				}
				require.NoError(t, m.Ack(ctx))
			}
			want := []string{}
			for range limit {
				want = append(want, "slow", "fast")
			}
			for range each - limit {
				want = append(want, "fast")
			}
			assert.Equal(t, want, order, "the fast group is served while the slow one waits")
			gs, err := q.Groups(ctx, 0)
			require.NoError(t, err)
			assert.Equal(t, []GroupStats{{Group: "slow", Ready: each - limit, Parked: true, RateParked: true, Rate: Rate{N: limit, Per: per}}}, gs)
			var due []string
			require.NoError(t, c.Do(ctx, radix.Cmd(&due, "ZRANGE", sh(q).k.gdue, "0", "-1")))
			assert.Equal(t, []string{"slow"}, due, "its time to come back is set for the promoters")

			was := commandCalls(t, c)
			times, groups := drainTimes(t, ctx, []receiver{cons}, each-limit, 1)
			calls := commandCalls(t, c)
			for _, g := range groups {
				require.Equal(t, "slow", g)
			}
			all = append(all, times...)
			most := maxInWindow(all, per)
			span := times[len(times)-1].Sub(times[0])
			scripts := calls["evalsha"] - was["evalsha"] + calls["eval"] - was["eval"]
			t.Logf("slow group: %d more in %v, most in a window: %d, scripts: %d", len(times), span, most, scripts)
			assert.LessOrEqual(t, most, limit)
			// 9 more at 3 per 300 ms: two more windows after the first of them.
			assert.GreaterOrEqual(t, span, 2*per-20*time.Millisecond)
			assert.Less(t, span, 3*time.Second)
			// takes, promotions and acks: a few per window, not a poll loop.
			assert.Less(t, scripts, 10*each)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(0), st.Ready)
			assert.Equal(t, int64(0), st.Delayed, "a parked group's time is no delayed message")
		})
	}
}
