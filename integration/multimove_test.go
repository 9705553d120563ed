package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// A MultiConsumer's probe reads many queues of a node in one call. While one
// queue's slot is half moved (some of its keys on each node), reading its
// keys on the source fails ("non local key", even for a key that exists
// nowhere); the probe reads each key with a pcall and leaves that queue
// alone, so the other queues of the node are still swept and promoted.
// Before, the whole call failed every round: a second queue's expired lease
// was not swept until the slot was stable. Once the move is finished, the
// moved queue is served again, and the move itself was not hindered.
func TestMultiConsumerServesOtherQueuesWhileASlotIsHalfMoved(t *testing.T) {
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := c.client(ctx, 8)
	base := "halfmoved-" + strconv.FormatInt(time.Now().UnixNano(), 36)

	// Two queues in different slots of the same primary.
	a := c.primaries[0]
	var qs []*prioq.Queue
	for i := 0; len(qs) < 2; i++ {
		q, err := prioq.Open(ctx, cl, fmt.Sprintf("%s-%d", base, i), prioq.Config{Layout: prioq.Levels(3)})
		require.NoError(t, err)
		if q.ShardNodes()[0] == a.addr() && (len(qs) == 0 || qs[0].ShardSlots()[0] != q.ShardSlots()[0]) {
			qs = append(qs, q)
		}
	}
	moving, other := qs[0], qs[1]

	var mu sync.Mutex
	var reported []string
	onErr := func(err error) {
		mu.Lock()
		reported = append(reported, err.Error())
		mu.Unlock()
		t.Logf("background: %v", err)
	}
	mc, err := prioq.NewMultiConsumer(ctx, cl, prioq.MultiConfig{Queues: []string{other.Name(), moving.Name()},
		ProbeInterval: 200 * time.Millisecond,
		Consumer:      prioq.ConsumerConfig{Lease: 500 * time.Millisecond, OnError: onErr}})
	require.NoError(t, err)
	defer mc.Close(context.Background())
	receive := func(want string) *prioq.Message {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		m, err := mc.Receive(rctx)
		require.NoError(t, err, "waiting for %q", want)
		require.Equal(t, want, string(m.Payload))
		return m
	}

	// The moving queue holds ready and delayed messages.
	for i := range 3 {
		_, err := moving.Enqueue(ctx, []byte(fmt.Sprintf("later-%d", i)), prioq.Delay(time.Hour))
		require.NoError(t, err)
	}
	// The other queue: a message taken and never acked (its lease ends
	// during the move).
	_, err = other.Enqueue(ctx, []byte("leased"))
	require.NoError(t, err)
	held := receive("leased")

	// Half of the moving queue's keys go to the other node.
	b := c.primaries[1]
	move := c.openMove(moving.ShardSlots()[0], b)
	require.NotNil(t, move)
	var keys []string
	for _, k := range move.keysLeft(100) {
		if strings.HasSuffix(k, ":delayed") || strings.HasSuffix(k, ":dstore") {
			keys = append(keys, k)
		}
	}
	require.Len(t, keys, 2)
	require.NoError(t, move.migrate(false, keys...))
	require.NotEmpty(t, move.keysLeft(100), "half moved")
	moveStart := time.Now()

	// While it is half moved: the other queue's expired lease is swept
	// (found by the probe alone: no announcement of a lease's end), and a
	// delayed message of it is promoted when due.
	_, err = other.Enqueue(ctx, []byte("due"), prioq.Delay(700*time.Millisecond))
	require.NoError(t, err)
	got := map[string]*prioq.Message{}
	for range 2 {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := mc.Receive(rctx)
		rcancel()
		require.NoError(t, err, "have %v", got)
		got[string(m.Payload)] = m
		require.NoError(t, m.Ack(ctx))
	}
	require.Contains(t, got, "due", "promoted")
	require.Contains(t, got, "leased", "swept")
	require.Equal(t, held.ID, got["leased"].ID)
	require.Equal(t, 2, got["leased"].Attempts, "redelivered after its lease ended")
	t.Logf("swept and promoted %v into the half move", time.Since(moveStart).Round(time.Millisecond))
	require.NotEmpty(t, move.keysLeft(100), "still half moved")
	mu.Lock()
	for _, r := range reported {
		require.NotContains(t, r, "non local key", "the probe no longer fails whole")
	}
	mu.Unlock()

	// The move finishes (nothing wrote a key of the slot on the source
	// meanwhile), and the moved queue is served on its new node.
	move.finish()
	_, err = moving.Enqueue(ctx, []byte("after"), prioq.Priority(2))
	require.NoError(t, err)
	m := receive("after")
	require.NoError(t, m.Ack(ctx))
	st, err := moving.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Delayed, "its delayed messages moved whole")
}
