package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// Setup: a two-primary cluster, two consumers with a heartbeat, then the
// worker registry's slot ({w}) half moved: MIGRATING/IMPORTING, one
// worker's record moved, the index and the rest left on the source (as an
// operator's resharding leaves it between two MIGRATE batches); the move is
// finished 300 ms later. Wrong: prioq.Workers fails at once with TRYAGAIN
// (its MGET names keys on both nodes) instead of waiting, retried, until the
// move is over as every queue operation does (DESIGN.md §5):
// store.Workers calls doBounded, not the shard's retryRedirects.
func TestClusterReview32WorkersAgainstAHalfMovedSlot(t *testing.T) {
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.client(ctx, 8)
	q, err := prioq.Open(ctx, cl, "review32", prioq.Config{Layout: prioq.Levels(2)})
	require.NoError(t, err)
	var ids []string
	for range 2 {
		cons, err := q.NewConsumer(prioq.ConsumerConfig{Heartbeat: 250 * time.Millisecond, NoPromoter: true})
		require.NoError(t, err)
		t.Cleanup(func() { cons.Close(context.Background()) })
		ids = append(ids, cons.ID())
	}
	require.Eventually(t, func() bool {
		ws, err := prioq.Workers(ctx, cl)
		return err == nil && len(ws) == 2
	}, 10*time.Second, 20*time.Millisecond)

	slot := int(radix.ClusterSlot([]byte("prioq:workers:{w}:index")))
	var to *localProc
	for _, p := range c.primaries {
		if p.addr() != c.ownerOf(slot) {
			to = p
		}
	}
	m := c.openMove(slot, to)
	require.NotNil(t, m)
	require.NoError(t, m.migrate(false, fmt.Sprintf("prioq:workers:{w}:rec:%s", ids[0])))
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		m.finish()
	}()
	defer func() { <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	ws, err := prioq.Workers(wctx, cl)
	require.NoError(t, err, "Workers against a half-moved registry slot")
	require.Len(t, ws, 2)
}
