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

// Acks that ride on takes (Run's, AckAndReceive's) on a cluster client: the
// riding take is an FCALL in the acks' pipeline, and radix, which knows
// where EVALSHA's keys are, took FCALL's first argument (the function's
// name) for its key, so the cluster client refused the whole pipeline
// ("keys ... do not belong to the same slot") before sending it. Every
// riding ack failed (Run reported ErrLeaseLost-free failures and the
// messages came back at the end of their leases, handled twice), and every
// AckAndReceive failed. Now each ack is made with its take, once.
func TestClusterAcksRideOnTakes(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.client(ctx, 16)
	q, err := prioq.Open(ctx, cl, queueName(t), prioq.Config{Layout: prioq.Levels(3)})
	require.NoError(t, err)
	defer q.Purge(ctx)
	const n = 40
	for i := range n {
		_, err := q.Enqueue(ctx, []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}

	// Run with one handler: each ack rides on the next take.
	cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 1, NoPromoter: true, OnError: func(error) {}})
	require.NoError(t, err)
	type finish struct {
		o   prioq.Outcome
		err error
	}
	finished := make(chan finish, n)
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() {
		runDone <- cons.Run(runCtx, func(_ context.Context, m *prioq.Message) error {
			m.AfterFinish(func(o prioq.Outcome, err error) { finished <- finish{o, err} })
			return nil
		})
	}()
	for i := range n / 2 {
		select {
		case f := <-finished:
			assert.Equal(t, prioq.OutcomeAcked, f.o, "message %d", i)
			assert.NoError(t, f.err, "message %d", i)
		case <-ctx.Done():
			t.Fatal("Run stopped handling")
		}
	}
	stop()
	<-runDone
	closeWithin(t, cons, 10*time.Second)

	// AckAndReceive: the other half.
	single, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer closeWithin(t, single, 10*time.Second)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	left := int(st.Ready)
	m, err := single.Receive(ctx)
	require.NoError(t, err)
	for i := 1; i < left; i++ {
		m, err = single.AckAndReceive(ctx, m)
		require.NoError(t, err, "call %d", i)
	}
	require.NoError(t, m.Ack(ctx))
	st, err = q.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Ready+st.InFlight+st.Delayed+st.Dead, "every message acked once: %+v", st)
	assert.EqualValues(t, n, st.Acked)
	assert.Zero(t, st.Expired, "no lease ended unacked")
}
