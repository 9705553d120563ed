package prioq

import (
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/require"
)

// A queue name may hold "/" ("team/alpha"), and a pattern's "*" matches it:
// ListQueues("*") and a MultiConsumer's Pattern found no such queue before
// (path.Match stops "*" at "/"), so the dashboard and the CLI had their own
// copies of the scan.
func TestListQueuesMatchesNamesWithSlashes(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	base := queueName(t)
	for _, n := range []string{base + "/alpha", base + "/beta/x", base + "-flat"} {
		q, err := Open(ctx, cl, n, Config{Layout: Levels(2)})
		require.NoError(t, err)
		_, err = q.Enqueue(ctx, []byte(n))
		require.NoError(t, err)
	}
	for pattern, want := range map[string][]string{
		base + "*":      {base + "-flat", base + "/alpha", base + "/beta/x"},
		base + "/*":     {base + "/alpha", base + "/beta/x"},
		base + "/?lph*": {base + "/alpha"},
		base + "[/]b*":  {base + "/beta/x"},
		base + "/beta":  nil,
	} {
		found, err := ListQueues(ctx, cl, pattern)
		require.NoError(t, err)
		require.Equal(t, want, found, "pattern %q", pattern)
	}
	all, err := ListQueues(ctx, cl, "")
	require.NoError(t, err)
	require.Contains(t, all, base+"/beta/x")
	_, err = ListQueues(ctx, cl, base+"/[a")
	require.ErrorIs(t, err, ErrInvalidOption)

	mc := newMulti(t, cl, MultiConfig{Pattern: base + "/*"})
	require.Equal(t, []string{base + "/alpha", base + "/beta/x"}, mc.Queues())
	got := map[string]bool{}
	for range 2 {
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		got[string(m.Payload)] = true
		require.NoError(t, m.Ack(ctx))
	}
	require.Equal(t, map[string]bool{base + "/alpha": true, base + "/beta/x": true}, got)
}
