package consume

import (
	"context"
	"testing"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// (Moved from the root's fetcher_test.go with the lane order.)
// Without weights the lanes are served highest first; with weights, lanes
// with a weight come first in a weighted draw, then the others highest first.
func TestLaneOrder(t *testing.T) {
	s := pureShard(store.Levels(4))
	l := s.Keys().Lanes()
	order := func(w []int) []string {
		return NewShardSource(s, FetchOptions{Weights: w}, context.Background(), nil).laneOrder()
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
