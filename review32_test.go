package prioq

import (
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/require"
)

// Setup: a Range queue (format 4, the default) whose only messages are in
// one group, under no limit: the group's marker heads its priority's list.
// Wrong: Stats.OldestReady reads 0 while five messages have waited 300 ms;
// the Levels layout reports their age (TestOldestReadyCountsGroups checks
// the marker case on Levels only). groupHeadLists reads a marker at a lane's
// head for Levels only, and listsDepth's head of a Range segment is the
// marker, which does not decode, so the group's list is never read.
func TestReview32RangeGroupOldestReady(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Range(0, 100, 4)})
	for range 5 {
		_, err := q.Enqueue(ctx, []byte("x"), Group("tenant"), Priority(50))
		require.NoError(t, err)
	}
	time.Sleep(300 * time.Millisecond)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(5), st.Ready)
	require.True(t, st.OldestReady >= 300*time.Millisecond, "a group's marker heads the Range list: oldest ready %v", st.OldestReady)
}
