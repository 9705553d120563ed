package store

import (
	"testing"

	"github.com/prioq/prioq/internal/testkit/assert"
)

// Only a lone ready message with a generated id for a Levels queue or a Range
// queue of format 4 skips Lua.
func TestCanSendPlain(t *testing.T) {
	levels, rng := pureShard(Levels(3)), pureShard(RangeSorted(0, 9, 2))
	assert.True(t, pureShard(Range(0, 9, 2)).canSendPlain([]Item{{ID: "g"}}), "a Range queue")
	plain := Item{ID: "g", Lane: 0}
	assert.True(t, levels.canSendPlain([]Item{plain}))
	assert.False(t, levels.canSendPlain([]Item{plain, plain}), "a batch")
	assert.False(t, levels.canSendPlain([]Item{{ID: "c", Caller: true}}), "a caller id")
	assert.False(t, levels.canSendPlain([]Item{{ID: "d", Due: "+5"}}), "a delay")
	assert.False(t, rng.canSendPlain([]Item{plain}), "a Range queue of format 2")
}
