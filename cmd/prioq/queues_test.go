package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/testkit"
)

// Wherever a listing is cut it says how much it shows of how many: dead
// letters (20 of 64), the next messages (2 of 5), the queues (2 of 3, on
// stderr with --json so that stdout stays JSON lines); uncut, it says
// nothing more.
func TestListingsSayWhenCut(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2), MaxAttempts: 1})
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cons.Close(ctx)
	for i := range 64 {
		_, err := q.Enqueue(ctx, []byte("x"))
		require.NoError(t, err)
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Retry(ctx, 0, fmt.Sprint("boom ", i)))
	}
	out, errOut, code := prioqCmd(t, "", "dead", q.Name(), "list")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 22, "a header, 20 rows and the count")
	assert.Equal(t, "20 of 64 dead letters, oldest first (-n 64 shows them all)", lines[21])
	out, _, _ = prioqCmd(t, "", "dead", q.Name(), "list", "-n", "64")
	assert.NotContains(t, out, " of 64")

	for range 5 {
		_, err := q.Enqueue(ctx, []byte("x"))
		require.NoError(t, err)
	}
	out, _, code = prioqCmd(t, "", "peek", q.Name(), "-n", "2")
	require.Equal(t, 0, code)
	assert.True(t, strings.HasSuffix(out, "\n2 of 5 ready (-n shows more)\n"), out)
	out, _, _ = prioqCmd(t, "", "peek", q.Name(), "-n", "5")
	assert.NotContains(t, out, " of 5")

	base := testkit.QueueName(t)
	for i := range 3 {
		_, errOut, code := prioqCmd(t, "", "create", fmt.Sprintf("%s-%d", base, i))
		require.Equal(t, 0, code, errOut)
	}
	out, _, code = prioqCmd(t, "", "queues", base+"-*", "--no-rates", "-n", "2")
	require.Equal(t, 0, code)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	assert.Equal(t, "2 of 3 queues (-n 0 shows all)", lines[3])
	out, errOut, code = prioqCmd(t, "", "queues", base+"-*", "--no-rates", "-n", "2", "--json")
	require.Equal(t, 0, code)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var js map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &js), line)
	}
	assert.Equal(t, "2 of 3 queues (-n 0 shows all)\n", errOut)
}

// Queues whose names hold "/" are listed, by every pattern that matches
// them ("*" included), and reached by name.
func TestQueuesWithSlashes(t *testing.T) {
	base := testkit.QueueName(t)
	for _, n := range []string{"team/alpha", "team/beta/x", "solo"} {
		_, errOut, code := prioqCmd(t, "", "create", base+"-"+n)
		require.Equal(t, 0, code, errOut)
	}
	for pattern, want := range map[string]int{base + "-*": 3, base + "-team/*": 2, base + "-*/x": 1, "*": 3} {
		out, errOut, code := prioqCmd(t, "", "queues", pattern, "--no-rates", "--json")
		require.Equal(t, 0, code, errOut)
		assert.Equal(t, want, strings.Count(out, `"queue":"`+base), "%s:\n%s", pattern, out)
	}
	out, errOut, code := prioqCmd(t, "", "stats", base+"-team/alpha")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, base+"-team/alpha")
}
