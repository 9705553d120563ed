package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// prioq peek --state delayed and in-flight page through those messages in
// the order they leave that state, saying how many there are.
func TestPeekDelayedAndInFlight(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	for _, h := range []int{3, 1, 2} {
		_, err := q.Enqueue(ctx, []byte("x"), prioq.ID(fmt.Sprintf("later-%d", h)), prioq.Delay(time.Duration(h)*time.Hour))
		require.NoError(t, err)
	}
	_, err := q.Enqueue(ctx, []byte("x"), prioq.ID("now"))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cons.Close(ctx)
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "now", m.ID)

	out, _, code := prioqCmd(t, "", "peek", q.Name(), "--state", "delayed", "-n", "2")
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	assert.True(t, strings.HasPrefix(lines[1], "later-1 ") && strings.HasPrefix(lines[2], "later-2 "), out)
	assert.Equal(t, "1-2 of 3 delayed (--from and -n page)", lines[3])
	out, _, code = prioqCmd(t, "", "peek", q.Name(), "--state", "delayed", "--from", "2")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "later-3 ")
	assert.NotContains(t, out, "later-1 ")

	out, _, code = prioqCmd(t, "", "peek", q.Name(), "--state", "in-flight")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "lease ends")
	assert.Contains(t, out, "now ")
	// Its holder: this process, by the worker registry (whose first
	// heartbeat may come after the first read).
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s:%d", host, os.Getpid())
	require.Eventually(t, func() bool {
		out, _, _ = prioqCmd(t, "", "peek", q.Name(), "--state", "in-flight")
		return strings.Contains(out, " "+holder+" ")
	}, 10*time.Second, 100*time.Millisecond, out)
	require.NoError(t, cons.Close(ctx)) // it leaves the registry; its message stays leased
	require.Eventually(t, func() bool {
		out, _, _ = prioqCmd(t, "", "peek", q.Name(), "--state", "in-flight")
		return strings.Contains(out, " unregistered:")
	}, 10*time.Second, 100*time.Millisecond, out)

	for _, args := range [][]string{{"--state", "dead"}, {"--from", "2"}, {"-n", "0"}, {"--state", "delayed", "--from", "-1"}} {
		_, errOut, code := prioqCmd(t, "", append([]string{"peek", q.Name()}, args...)...)
		assert.Equal(t, 2, code, "%v: %s", args, errOut)
	}
}

// prioq run-now makes a delayed message ready; an unknown one is refused.
func TestRunNowCommand(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	_, err := q.Enqueue(ctx, []byte("x"), prioq.ID("report"), prioq.Delay(time.Hour))
	require.NoError(t, err)
	out, errOut, code := prioqCmd(t, "", "run-now", q.Name(), "report")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "report is ready now\n", out)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Ready)
	assert.Equal(t, int64(0), st.Delayed)
	_, errOut, code = prioqCmd(t, "", "run-now", q.Name(), "report")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "no delayed message")
}
