package prioqprom

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// Setup: Config.Groups 5 and two queues; one's group limits hash
// (prioq:{Q}:glimits) holds a string (a key of the wrong type), which its
// Stats does not read. Wrong: the Groups read fails and Collect sends
// prometheus.NewInvalidMetric, which fails the whole Gather: promhttp
// answers 500 and every queue's series (the healthy one's prioq_up
// included) are lost for as long as the key stays, and likewise when a
// large queue's Groups (O(groups)) times out. The package says a queue whose
// Stats fails reports prioq_up 0 only: one queue's failure must not take
// the others down. Fix: on a Groups error send no group series for that
// queue (and perhaps a prioq_groups_up 0 gauge), not an invalid metric.
func TestReview34_GroupsFailureKeepsTheScrape(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bad := open(t, prioq.Config{Layout: prioq.Levels(2)})
	good := open(t, prioq.Config{Layout: prioq.Levels(2)})
	for _, q := range []*prioq.Queue{bad, good} {
		_, err := q.Enqueue(ctx, []byte("x"), prioq.Group("g"))
		require.NoError(t, err)
	}
	require.NoError(t, client.Do(ctx, radix.Cmd(nil, "SET", "prioq:{"+bad.Name()+"}:glimits", "damaged")))
	t.Cleanup(func() { _ = client.Do(context.Background(), radix.Cmd(nil, "DEL", "prioq:{"+bad.Name()+"}:glimits")) })
	st, err := bad.Stats(ctx)
	require.NoError(t, err, "its Stats answers")
	require.Equal(t, int64(1), st.Ready)

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(NewCollector(Config{Queues: []*prioq.Queue{bad, good}, Groups: 5})))
	mfs, err := reg.Gather()
	require.NoError(t, err, "one queue's groups that cannot be read fail the whole scrape")
	ups := 0
	for _, mf := range mfs {
		if mf.GetName() == "prioq_up" {
			ups = len(mf.GetMetric())
		}
	}
	assert.Equal(t, 2, ups)
}

// Setup: Config.Groups and a queue whose group counts hash
// (prioq:{Q}:gready) holds a field that is not UTF-8 (a damaged record: a
// group name prioq would refuse, written by hand or by a fault). Wrong:
// Collect passes the name as a label value to MustNewConstMetric, which
// panics; under a registry's Gather that panic is in a goroutine of its
// own and ends the process that exports the metrics. Fix: skip (or
// escape) a group name that is not valid UTF-8, with NewConstMetric and
// its error dropped or logged.
func TestReview34_DamagedGroupNameDoesNotPanic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := open(t, prioq.Config{Layout: prioq.Levels(2)})
	_, err := q.Enqueue(ctx, []byte("x"), prioq.Group("g"))
	require.NoError(t, err)
	require.NoError(t, client.Do(ctx, radix.Cmd(nil, "HINCRBY", "prioq:{"+q.Name()+"}:gready", "\xff\xfe", "7")))
	t.Cleanup(func() {
		_ = client.Do(context.Background(), radix.Cmd(nil, "HDEL", "prioq:{"+q.Name()+"}:gready", "\xff\xfe"))
	})
	c := NewCollector(Config{Queues: []*prioq.Queue{q}, Groups: 5})
	ch := make(chan prometheus.Metric, 1000)
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		c.Collect(ch)
	}()
	close(ch)
	assert.Nil(t, panicked, "Collect panics on a damaged group name: %v", fmt.Sprint(panicked))
}
