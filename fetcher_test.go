package prioq

import (
	"context"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func TestWeightedOrderDoesNotStarve(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(2)})
	items := make([]EnqueueItem, 0, 800)
	for i := 0; i < 400; i++ {
		items = append(items, EnqueueItem{Payload: []byte("lo"), Options: []Option{Priority(0)}},
			EnqueueItem{Payload: []byte("hi"), Options: []Option{Priority(1)}})
	}
	_, err := q.EnqueueBatch(ctx, items)
	require.NoError(t, err)
	_, err = q.NewConsumer(ConsumerConfig{Weights: []int{1}})
	assert.ErrorIs(t, err, ErrInvalidOption)
	cons := newConsumer(t, q, ConsumerConfig{Weights: []int{1, 3}})
	low := 0
	for i := 0; i < 200; i++ {
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		if m.Priority == 0 {
			low++
		}
		require.NoError(t, m.Ack(ctx))
	}
	// Expected 25%; strict order would give 0.
	assert.Greater(t, low, 20)
	assert.Less(t, low, 90)
}

// Without weights the lanes are served highest first; with weights, lanes
// with a weight come first in a weighted draw, then the others highest first.
func TestLaneOrder(t *testing.T) {
	q := pureQueue(Config{Layout: Levels(4)})
	l := sh(q).k.lanes
	order := func(w []int) []string {
		f := newFetcher(q.shards, &ConsumerConfig{Weights: w}, context.Background(), nil)
		return f.laneOrder()
	}
	assert.Equal(t, []string{l[3], l[2], l[1], l[0]}, order(nil))
	assert.Equal(t, []string{l[3], l[2], l[1], l[0]}, order([]int{0, 0, 0, 0}))
	assert.Equal(t, []string{l[1], l[3], l[2], l[0]}, order([]int{0, 7, 0, 0}))

	firsts := map[string]int{}
	for i := 0; i < 4000; i++ {
		o := order([]int{0, 1, 0, 3})
		require.Len(t, o, 4)
		assert.Equal(t, []string{l[2], l[0]}, o[2:], "zero-weight lanes last, highest first")
		firsts[o[0]]++
	}
	// Lane 3 comes first with probability 3/4 (mean 3000, sd 27).
	assert.Equal(t, 4000, firsts[l[3]]+firsts[l[1]])
	assert.Greater(t, firsts[l[3]], 2700)
	assert.Less(t, firsts[l[3]], 3300)
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
