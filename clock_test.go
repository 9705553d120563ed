package prioq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Hosts whose clocks are wrong must not be able to expire another consumer's
// lease, promote early, or make a handler's lease context end early or late:
// every "now" that decides a deadline is the Redis server's. Each handle below
// is the same queue seen from a host whose clock is off by skew.
func skewed(q *Queue, skew time.Duration) *Queue {
	return q.withClock(func() time.Time { return time.Now().Add(skew) })
}

func TestSkewedHostsExpireAndPromoteNothingEarly(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			ahead, behind := skewed(q, 31*time.Second), skewed(q, -5*time.Minute)

			// A sweeper 31 s ahead does not expire an honest 2 s lease.
			_, err := q.Enqueue(ctx, []byte("leased"))
			require.NoError(t, err)
			honest := newConsumer(t, q, ConsumerConfig{Lease: 2 * time.Second, NoPromoter: true, SweepInterval: time.Hour})
			m, err := honest.Receive(ctx)
			require.NoError(t, err)
			newConsumer(t, ahead, ConsumerConfig{SweepInterval: 20 * time.Millisecond, NoPromoter: true})
			// A consumer 5 minutes behind takes a message with a 2 s lease: an
			// honest sweeper must not find it expired.
			_, err = q.Enqueue(ctx, []byte("leased behind"))
			require.NoError(t, err)
			late := newConsumer(t, behind, ConsumerConfig{Lease: 2 * time.Second, NoPromoter: true, SweepInterval: time.Hour})
			lm, err := late.Receive(ctx)
			require.NoError(t, err)
			newConsumer(t, q, ConsumerConfig{SweepInterval: 20 * time.Millisecond, NoPromoter: true})
			time.Sleep(time.Second)
			assert.NoError(t, m.Ack(ctx), "a sweeper ahead took an unexpired lease")
			assert.NoError(t, lm.Ack(ctx), "a lease taken by a host behind was expired early")

			// Delays: a producer behind or ahead, a promoter ahead.
			type sent struct {
				at    time.Time
				delay time.Duration
			}
			var mu sync.Mutex
			due := map[string]sent{}
			send := func(p *Queue, d time.Duration) {
				before := time.Now()
				id, err := p.Enqueue(ctx, []byte("later"), Delay(d))
				require.NoError(t, err)
				mu.Lock()
				due[id] = sent{before, d}
				mu.Unlock()
			}
			promoter := newConsumer(t, skewed(q, 4*time.Second), ConsumerConfig{})
			send(q, 1500*time.Millisecond)
			send(behind, 1500*time.Millisecond)
			send(ahead, 500*time.Millisecond)
			for range 3 {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				got, err := promoter.Receive(rctx)
				cancel()
				require.NoError(t, err, "a delayed message was not delivered within 5 s (a producer ahead made it late)")
				now := time.Now()
				mu.Lock()
				s := due[got.ID]
				mu.Unlock()
				assert.False(t, now.Before(s.at.Add(s.delay)), "%v delay delivered after %v", s.delay, now.Sub(s.at))
				assert.Less(t, now.Sub(s.at), s.delay+time.Second, "%v delay delivered late", s.delay)
				require.NoError(t, got.Ack(ctx))
			}
		})
	}
}

// A handler's context ends when its lease does, measured on the host's own
// monotonic clock, whatever its wall clock says.
func TestSkewedHostHandlerContextFollowsTheLease(t *testing.T) {
	c := newClient(t)
	q := openQueue(t, c, Config{})
	for _, skew := range []time.Duration{5 * time.Minute, -5 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			_, err := q.Enqueue(ctx, []byte("x"))
			require.NoError(t, err)
			cons := newConsumer(t, skewed(q, skew), ConsumerConfig{Lease: time.Second, NoPromoter: true, NoRenew: true})
			ended := make(chan time.Duration, 1)
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			go func() {
				_ = cons.Run(runCtx, func(hctx context.Context, m *Message) error {
					start := time.Now()
					select {
					case <-hctx.Done():
						ended <- time.Since(start)
					case <-time.After(3 * time.Second):
						ended <- -1
					}
					return errors.New("done")
				})
			}()
			select {
			case d := <-ended:
				require.NotEqual(t, time.Duration(-1), d, "the handler's context outlived its 1 s lease by 3 s")
				assert.Greater(t, d, 800*time.Millisecond, "the handler's context ended early")
				assert.Less(t, d, 1500*time.Millisecond)
			case <-ctx.Done():
				t.Fatal("no delivery")
			}
		})
	}
}
