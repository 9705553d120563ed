// Package testq opens prioq queues for the tests of the modules built on
// prioq (the command, the dashboard, the collectors). The root package's own
// tests cannot use it: it imports prioq.
package testq

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/fanout"
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

// OpenMany creates n queues named base-00000, base-00001, ... with cfg, 32 at
// a time, and deletes their keys when the test ends.
func OpenMany(t testing.TB, c radix.Client, base string, n int, cfg prioq.Config) []string {
	t.Helper()
	names := make([]string, n)
	errs := make([]error, n)
	fanout.Each(n, 32, func(i int) {
		names[i] = fmt.Sprintf("%s-%05d", base, i)
		_, errs[i] = prioq.Open(context.Background(), c, names[i], cfg)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("open %d test queues: %v", n, err)
	}
	t.Cleanup(func() {
		for _, name := range names {
			if q, err := prioq.OpenExisting(context.Background(), c, name, prioq.Config{}); err == nil {
				_, _ = q.Purge(context.Background())
			}
			_ = c.Do(context.Background(), radix.Cmd(nil, "DEL", "prioq:{"+name+"}:meta", "prioq:{"+name+"}:counts"))
		}
	})
	return names
}
