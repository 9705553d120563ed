// Package testq opens prioq queues for the tests of the modules built on
// prioq (the command, the dashboard, the collectors). The root package's own
// tests cannot use it: it imports prioq.
package testq

import (
	"context"
	"testing"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/testkit"
)

// Open opens a queue named after the test with cfg, and empties it (waiting
// and dead messages) when the test ends.
func Open(t testing.TB, c radix.Client, cfg prioq.Config) *prioq.Queue {
	t.Helper()
	q, err := prioq.Open(context.Background(), c, testkit.QueueName(t), cfg)
	if err != nil {
		t.Fatalf("open a test queue: %v", err)
	}
	t.Cleanup(func() { _, _ = q.Purge(context.Background()); _, _ = q.PurgeDead(context.Background()) })
	return q
}
