package prioq

import (
	"math"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// DeadLetters with a count near math.MaxInt reads from start to the end.
// Before the fix start+n-1 overflowed and nothing came back.
func TestDeadLettersWithAHugeCount(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{})
	enqueueIDs(ctx, t, q, "a", "b", "c", "d")
	got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 4, time.Minute)
	require.NoError(t, err)
	for _, m := range got {
		require.NoError(t, m.fail(ctx, 0, "x", store.FailDead))
	}
	dead, err := q.DeadLetters(ctx, 2, math.MaxInt)
	require.NoError(t, err)
	assert.Len(t, dead, 2)
	dead, err = q.DeadLetters(ctx, math.MaxInt, math.MaxInt)
	require.NoError(t, err)
	assert.Len(t, dead, 0)
}
