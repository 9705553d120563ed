package prioq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		time.Sleep(20 * time.Millisecond)
		_, err = q.Enqueue(ctx, []byte(fmt.Sprint(i)))
		require.NoError(t, err)
		require.NoError(t, <-closed)
		var n int
		require.NoError(t, c.Do(ctx, radix.Cmd(&n, "LLEN", q.k.lanes[0])))
		require.Equal(t, 1, n, "run %d: Close returned before the popped message was back", i)
	}
}

// Expired leases come back ahead of newer messages and in the order they were
// taken, also when a sweep needs several calls and when one take leased more
// than nine messages (lease tokens of one take sort in take order).
func TestExpiredLeasesComeBackInOrder(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			var want []string
			for i := 0; i < 25; i++ {
				id, err := q.Enqueue(ctx, []byte("x"), Priority(1))
				require.NoError(t, err)
				want = append(want, id)
			}
			first, _, err := q.take(ctx, q.k.highFirst, 12, time.Millisecond)
			require.NoError(t, err)
			second, _, err := q.take(ctx, q.k.highFirst, 12, 20*time.Millisecond)
			require.NoError(t, err)
			require.Len(t, append(first, second...), 24)
			newer, err := q.Enqueue(ctx, []byte("newer"), Priority(1))
			require.NoError(t, err)
			time.Sleep(50 * time.Millisecond)
			for {
				_, _, more, err := q.sweep(ctx, 5) // five at a time: several calls
				require.NoError(t, err)
				if !more {
					break
				}
			}
			peek, err := q.Peek(ctx, 100)
			require.NoError(t, err)
			var got []string
			for _, m := range peek {
				got = append(got, m.ID)
			}
			assert.Equal(t, append(want, newer), got)
		})
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
				require.NoError(t, cons.putBack(ctx, held))
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
