package prioqprom

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/redisfind"
	"github.com/prioq/prioq/internal/testkit"
	"github.com/prioq/prioq/internal/testkit/testq"
)

var client radix.Client

func TestMain(m *testing.M) {
	os.Exit(testkit.RunWithRedis(m, 8, func(_ string, c radix.Client) { client = c }))
}

func open(t *testing.T, cfg prioq.Config) *prioq.Queue { return testq.Open(t, client, cfg) }

// After known enqueues, a lease, a dead letter and a pause, a scrape reports
// exactly those numbers, per queue and lane.
func TestCollectorReportsStats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := open(t, prioq.Config{Layout: prioq.Levels(3), MaxAttempts: 1})
	b := open(t, prioq.Config{Layout: prioq.Levels(2), Mode: prioq.AtMostOnce})
	for i, p := range []int64{0, 2, 2, 2, 1} {
		_, err := a.Enqueue(ctx, []byte("x"), prioq.Priority(p), prioq.ID(fmt.Sprintf("a-%d", i)))
		require.NoError(t, err)
	}
	_, err := a.Enqueue(ctx, []byte("later"), prioq.Delay(time.Hour))
	require.NoError(t, err)
	_, err = b.Enqueue(ctx, []byte("y"), prioq.Priority(1))
	require.NoError(t, err)

	cons, err := a.NewConsumer(prioq.ConsumerConfig{})
	require.NoError(t, err)
	defer cons.Close(ctx)
	msgs, err := cons.ReceiveBatch(ctx, 2) // two of lane 2
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.NoError(t, msgs[0].Retry(ctx, 0, "dies")) // MaxAttempts 1: dead
	require.NoError(t, a.Pause(ctx))

	c := NewCollector(Config{Queues: []*prioq.Queue{a, b}})
	want := fmt.Sprintf(`
# HELP prioq_acked_messages_total Acks since the queue began (prioq.Stats.Acked, AtLeastOnce; for rates).
# TYPE prioq_acked_messages_total counter
prioq_acked_messages_total{queue=%[1]q} 0
prioq_acked_messages_total{queue=%[2]q} 0
# HELP prioq_dead_messages Messages in the dead-letter list.
# TYPE prioq_dead_messages gauge
prioq_dead_messages{queue=%[1]q} 1
prioq_dead_messages{queue=%[2]q} 0
# HELP prioq_delayed_messages Messages waiting for their due time.
# TYPE prioq_delayed_messages gauge
prioq_delayed_messages{queue=%[1]q} 1
prioq_delayed_messages{queue=%[2]q} 0
# HELP prioq_enqueued_messages_total Messages stored by enqueues since the queue began (prioq.Stats.Enqueued; for rates).
# TYPE prioq_enqueued_messages_total counter
prioq_enqueued_messages_total{queue=%[1]q} 6
prioq_enqueued_messages_total{queue=%[2]q} 1
# HELP prioq_inflight_messages Messages leased to consumers (AtLeastOnce).
# TYPE prioq_inflight_messages gauge
prioq_inflight_messages{queue=%[1]q} 1
prioq_inflight_messages{queue=%[2]q} 0
# HELP prioq_paused 1 while the queue's consumers are paused.
# TYPE prioq_paused gauge
prioq_paused{queue=%[1]q} 1
prioq_paused{queue=%[2]q} 0
# HELP prioq_ready_messages Ready messages per lane (lane 0 has the lowest priorities).
# TYPE prioq_ready_messages gauge
prioq_ready_messages{lane="0",queue=%[1]q} 1
prioq_ready_messages{lane="1",queue=%[1]q} 1
prioq_ready_messages{lane="2",queue=%[1]q} 1
prioq_ready_messages{lane="0",queue=%[2]q} 0
prioq_ready_messages{lane="1",queue=%[2]q} 1
# HELP prioq_up 1 when the queue's Stats answered within the scrape's timeout.
# TYPE prioq_up gauge
prioq_up{queue=%[1]q} 1
prioq_up{queue=%[2]q} 1
`, a.Name(), b.Name())
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want),
		"prioq_dead_messages", "prioq_delayed_messages", "prioq_inflight_messages", "prioq_paused", "prioq_ready_messages", "prioq_up",
		"prioq_enqueued_messages_total", "prioq_acked_messages_total"))

	// The failure totals: a's retry that dead-lettered its message.
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(fmt.Sprintf(`
# HELP prioq_dead_lettered_messages_total Messages moved to the dead letters since the queue began (prioq.Stats.DeadLettered).
# TYPE prioq_dead_lettered_messages_total counter
prioq_dead_lettered_messages_total{queue=%[1]q} 1
prioq_dead_lettered_messages_total{queue=%[2]q} 0
# HELP prioq_retried_messages_total Deliveries that failed and were scheduled again, since the queue began (prioq.Stats.Retried).
# TYPE prioq_retried_messages_total counter
prioq_retried_messages_total{queue=%[1]q} 0
prioq_retried_messages_total{queue=%[2]q} 0
`, a.Name(), b.Name())), "prioq_dead_lettered_messages_total", "prioq_retried_messages_total"))

	// The consumers of each queue (the worker registry): a has one, b none,
	// which with b's ready message is what to alert on.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ws, err := a.Workers(ctx)
		require.NoError(t, err)
		if len(ws) == 1 || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(fmt.Sprintf(`
# HELP prioq_consumers Live consumers that serve the queue (the worker registry: prioq.Queue.Workers).
# TYPE prioq_consumers gauge
prioq_consumers{queue=%[1]q} 1
prioq_consumers{queue=%[2]q} 0
`, a.Name(), b.Name())), "prioq_consumers"))

	// An ack moves the ack total.
	require.NoError(t, msgs[1].Ack(ctx))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(fmt.Sprintf(`
# HELP prioq_acked_messages_total Acks since the queue began (prioq.Stats.Acked, AtLeastOnce; for rates).
# TYPE prioq_acked_messages_total counter
prioq_acked_messages_total{queue=%[1]q} 1
prioq_acked_messages_total{queue=%[2]q} 0
`, a.Name(), b.Name())), "prioq_acked_messages_total"))

	// The oldest ready message's age grows with time.
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	time.Sleep(20 * time.Millisecond)
	families, err := reg.Gather()
	require.NoError(t, err)
	ages := map[string]float64{}
	for _, f := range families {
		if f.GetName() == "prioq_oldest_ready_age_seconds" {
			for _, m := range f.GetMetric() {
				ages[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	assert.Greater(t, ages[a.Name()], 0.0)
	assert.Less(t, ages[a.Name()], 20.0)
	assert.Greater(t, ages[b.Name()], 0.0)
}

// A queue whose Redis is gone reports up 0 and nothing else, beside the
// queues that answer, and the scrape ends within the timeout.
func TestCollectorQueueDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := redisfind.StartBinary(ctx, "redis-server")
	require.NoError(t, err)
	own, err := radix.PoolConfig{Size: 2}.New(ctx, "tcp", srv.Addr)
	require.NoError(t, err)
	defer own.Close()
	gone, err := prioq.Open(ctx, own, "gone", prioq.Config{Layout: prioq.Levels(2)})
	require.NoError(t, err)
	srv.Stop()
	good := open(t, prioq.Config{Layout: prioq.Levels(3)})

	c := NewCollector(Config{Queues: []*prioq.Queue{gone, good}, Timeout: time.Second})
	start := time.Now()
	want := fmt.Sprintf(`
# HELP prioq_up 1 when the queue's Stats answered within the scrape's timeout.
# TYPE prioq_up gauge
prioq_up{queue="gone"} 0
prioq_up{queue=%q} 1
`, good.Name())
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "prioq_up"))
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Equal(t, 1+3+14, testutil.CollectAndCount(c), "up for the gone queue; 3 lanes and 14 more for the good one (its consumers, parked groups, failure and cancel totals included)")
}

// With Config.Groups, the most loaded groups of each queue have their own
// series (issue 32: "the Prometheus collector count what waits in groups");
// without it, none.
func TestCollectorGroups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := open(t, prioq.Config{Layout: prioq.Levels(2)})
	require.NoError(t, q.SetGroupLimit(ctx, "busy", prioq.GroupLimit{Concurrency: 1}))
	for range 3 {
		_, err := q.Enqueue(ctx, []byte("x"), prioq.Group("busy"))
		require.NoError(t, err)
	}
	_, err := q.Enqueue(ctx, []byte("x"), prioq.Group("quiet"))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("x"), prioq.Group("small"))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cons.Close(ctx)
	m, err := cons.Receive(ctx) // busy's first: busy is at its limit
	require.NoError(t, err)
	require.Equal(t, "busy", m.Group)
	for _, g := range []string{"quiet", "small"} { // busy's marker went behind them
		m, err = cons.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, g, m.Group)
	}
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cons.Receive(short) // meets busy at its limit: parks it, takes nothing
	stop()
	require.Error(t, err)

	c := NewCollector(Config{Queues: []*prioq.Queue{q}, Groups: 2})
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(fmt.Sprintf(`
# HELP prioq_group_inflight_messages A group's messages leased to consumers (Config.Groups most loaded groups).
# TYPE prioq_group_inflight_messages gauge
prioq_group_inflight_messages{group="busy",queue=%[1]q} 1
prioq_group_inflight_messages{group="quiet",queue=%[1]q} 1
# HELP prioq_group_parked 1 while a group waits at its concurrency limit, 2 at its rate limit, else 0 (Config.Groups most loaded groups).
# TYPE prioq_group_parked gauge
prioq_group_parked{group="busy",queue=%[1]q} 1
prioq_group_parked{group="quiet",queue=%[1]q} 0
# HELP prioq_group_ready_messages A group's messages waiting in its lists (Config.Groups most loaded groups).
# TYPE prioq_group_ready_messages gauge
prioq_group_ready_messages{group="busy",queue=%[1]q} 2
prioq_group_ready_messages{group="quiet",queue=%[1]q} 0
`, q.Name())), "prioq_group_ready_messages", "prioq_group_inflight_messages", "prioq_group_parked"))

	none := NewCollector(Config{Queues: []*prioq.Queue{q}})
	assert.Equal(t, 0, testutil.CollectAndCount(none, "prioq_group_ready_messages", "prioq_group_parked"))
}

// A message in flight stopped by Queue.Cancel is counted (issue 35's
// cancel, exported beside the other totals).
func TestCollectorCountsCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := open(t, prioq.Config{Layout: prioq.Levels(2)})
	id, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cons.Close(ctx)
	_, err = cons.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, q.Cancel(ctx, id))
	c := NewCollector(Config{Queues: []*prioq.Queue{q}})
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(fmt.Sprintf(`
# HELP prioq_cancelled_messages_total Messages in flight stopped by Queue.Cancel, since the queue began (prioq.Stats.Cancelled).
# TYPE prioq_cancelled_messages_total counter
prioq_cancelled_messages_total{queue=%q} 1
`, q.Name())), "prioq_cancelled_messages_total"))
}
