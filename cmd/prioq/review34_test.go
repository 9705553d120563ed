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

// Setup: this process runs a consumer of queue x with a heartbeat (the
// registry names its holder id) and one of queue y without a heartbeat,
// which holds a message of y. Wrong: prioq peek y --state in-flight says
// "unregistered:<id>" (a holder whose process died or closed) though a
// live consumer names that process: holderName is given Queue.Workers of
// y, the consumers that serve y only. Fix: resolve holders against every
// worker of the registry (prioq.Workers), as the dashboard's HolderOf
// should (dashboard TestReview34_HolderOfAProcessRegisteredForAnotherQueue).
func TestReview34_PeekHolderRegisteredForAnotherQueue(t *testing.T) {
	ctx := context.Background()
	x := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	y := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	cx, err := x.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cx.Close(ctx)
	cy, err := y.NewConsumer(prioq.ConsumerConfig{NoPromoter: true, NoHeartbeat: true, Lease: time.Minute})
	require.NoError(t, err)
	defer cy.Close(ctx)
	_, err = y.Enqueue(ctx, []byte("x"), prioq.ID("held"))
	require.NoError(t, err)
	m, err := cy.Receive(ctx)
	require.NoError(t, err)
	defer m.Ack(ctx)
	require.Eventually(t, func() bool { ws, err := x.Workers(ctx); return err == nil && len(ws) == 1 }, 10*time.Second, 20*time.Millisecond)

	out, _, code := prioqCmd(t, "", "peek", y.Name(), "--state", "in-flight")
	require.Equal(t, 0, code)
	host, _ := os.Hostname()
	assert.Contains(t, out, fmt.Sprintf(" %s:%d ", host, os.Getpid()), "the holder's process is alive and registered")
	assert.False(t, strings.Contains(out, "unregistered:"), out)
}
