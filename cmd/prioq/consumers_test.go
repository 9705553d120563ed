package main

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// prioq consumers shows the live consumers, of every queue or of one, and
// says so when a queue has none; a consumer that closed is gone.
func TestConsumersListsTheLiveOnes(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	idle := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 4})
	require.NoError(t, err)
	defer cons.Close(ctx)
	// Its first heartbeat is sent as it starts: wait for it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ws, err := q.Workers(ctx)
		require.NoError(t, err)
		if len(ws) == 1 || time.Now().After(deadline) {
			break
		}
	}

	out, _, code := prioqCmd(t, "", "consumers", q.Name())
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	assert.True(t, strings.HasPrefix(lines[0], "id "), out)
	for _, want := range []string{cons.ID(), "consumer", strconv.Itoa(os.Getpid()), q.Name(), " 4 "} {
		assert.Contains(t, lines[1], want)
	}

	out, _, code = prioqCmd(t, "", "consumers", q.Name(), "--json")
	require.Equal(t, 0, code)
	var row map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &row), out)
	assert.Equal(t, cons.ID(), row["id"])
	assert.Equal(t, []any{q.Name()}, row["queues"])
	assert.Equal(t, float64(4), row["concurrency"])

	out, _, code = prioqCmd(t, "", "consumers", idle.Name())
	require.Equal(t, 0, code)
	assert.Equal(t, "no consumer serves \""+idle.Name()+"\"\n", out)

	all, _, code := prioqCmd(t, "", "consumers")
	require.Equal(t, 0, code)
	assert.Contains(t, all, cons.ID())

	require.NoError(t, cons.Close(ctx))
	out, _, code = prioqCmd(t, "", "consumers", q.Name())
	require.Equal(t, 0, code)
	assert.Contains(t, out, "no consumer serves")

	_, errOut, code := prioqCmd(t, "", "consumers", "a", "b")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "one queue at most")
}
