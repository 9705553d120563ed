package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// Issue 35, in consumer processes: under Run's lease renewal a handler ten
// times as long as its lease (3 s, lease 300 ms) finishes once, never
// delivered again while its process lives; the messages of a process
// SIGKILLed while its handlers run come back about one lease after the
// kill, not after the handlers' time.
func TestRunRenewalInAProcessAndItsSIGKILL(t *testing.T) {
	redis := ownRedis(t)
	cl := newPool(t, redis.Addr, 16)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := queueSpec{queueName(t), "levels", "alo"}
	q, err := prioq.Open(ctx, cl, spec.name, spec.config())
	require.NoError(t, err)
	enqueue := func(prefix string) {
		for i := range 4 {
			_, err := q.Enqueue(ctx, []byte("long job"), prioq.ID(fmt.Sprintf("%s-%d", prefix, i)))
			require.NoError(t, err)
		}
	}

	enqueue("long")
	h := startHelper(t, "run-long", redis.Addr, spec)
	h.ready(t)
	require.Eventually(t, func() bool { return len(h.get("A")) == 4 }, time.Minute, 20*time.Millisecond, "the long handlers finish")
	assert.Len(t, h.get("S"), 4, "each started once: renewed, never delivered again")
	assert.Empty(t, h.get("X"), "no handler lost its lease")

	enqueue("killed")
	require.Eventually(t, func() bool { return len(h.get("S")) == 8 }, time.Minute, 20*time.Millisecond)
	time.Sleep(900 * time.Millisecond) // three leases: renewal keeps them
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), st.InFlight, "still leased to the running handlers")
	killed := time.Now()
	h.kill()

	cons, err := q.NewConsumer(prioq.ConsumerConfig{Lease: time.Minute, SweepInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer cons.Close(context.Background())
	for range 4 {
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, m.Attempts, "%s: its second delivery, after the kill", m.ID)
		require.NoError(t, m.Ack(ctx))
	}
	back := time.Since(killed)
	t.Logf("the SIGKILLed process's 4 messages back %v after the kill (lease 300 ms, sweep every 50 ms; its handlers had 2 s left)", back)
	assert.Less(t, back, 2500*time.Millisecond, "back about one lease after the kill, before the handlers' time would have ended")
}
