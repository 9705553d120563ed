package prioqotel

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// Setup: the Enqueue middleware and three enqueues with DebounceFirst(k):
// the first stores a message, the two others fold into it
// (EnqueueResult.Folded: nothing stored; Stats.Enqueued counts 1). Wrong:
// the middleware counts every result without Err as stored, so
// prioq.messages.enqueued ("Messages stored by Enqueue and EnqueueBatch")
// reads 3, and disagrees with prioq_enqueued_messages_total. Fix: count
// results with Err == nil and !Folded.
func TestReview34_FoldedEnqueuesAreNotCountedStored(t *testing.T) {
	f := setup(t, false)
	ctx := context.Background()
	for range 3 {
		_, err := f.q.Enqueue(ctx, []byte("x"), prioq.DebounceFirst("k", time.Hour))
		require.NoError(t, err)
	}
	st, err := f.q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Enqueued)
	assert.Equal(t, int64(1), f.counter("prioq.messages.enqueued"), "one message stored, two folded into it")
}
