package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// The scripts run as Redis Functions (internal/store/funcs.go), and a
// library is per node: every primary that serves a queue gets it (Open
// loads it on the queue's node), and a slot moved to a new primary (its keys
// move, the library does not) is served by calls that load it there, none
// of them failing. Failed before funcs.go: no node held a library.
func TestClusterLibraryOnEachNode(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 3, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.client(ctx, 8)
	base := queueName(t)
	var names []string
	var queues []*prioq.Queue
	for i := range 3 {
		names = append(names, queueOnNode(base, i))
		q, err := prioq.Open(ctx, cl, names[i], prioq.Config{Layout: prioq.Levels(3)})
		require.NoError(t, err)
		queues = append(queues, q)
		enqueueReceiveAck(t, ctx, q, "m"+strconv.Itoa(i))
	}
	for _, p := range c.primaries {
		assert.Equal(t, 1, libraryCount(t, ctx, p.addr()), "the library on %s", p.addr())
	}

	added := c.addPrimary()
	require.Zero(t, libraryCount(t, ctx, added.addr()))
	c.moveSlot(int(radix.ClusterSlot([]byte("{"+names[0]+"}"))), added, 10, 0)
	enqueueReceiveAck(t, ctx, queues[0], "moved")
	assert.Equal(t, 1, libraryCount(t, ctx, added.addr()), "loaded on the slot's new node by its first call")
}

// enqueueReceiveAck runs a message with a caller id through enqueue.lua,
// take.lua and ack.lua.
func enqueueReceiveAck(t *testing.T, ctx context.Context, q *prioq.Queue, id string) {
	t.Helper()
	_, err := q.Enqueue(ctx, []byte("x"), prioq.ID(id))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cons.Close(ctx)
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, id, m.ID)
	require.NoError(t, m.Ack(ctx))
}

// libraryCount is how many Functions libraries the node at addr holds.
func libraryCount(t *testing.T, ctx context.Context, addr string) int {
	t.Helper()
	var list []any
	require.NoError(t, nodeDo(ctx, addr, &list, "FUNCTION", "LIST"))
	return len(list)
}
