package consume

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit"
)

// The consumer's parts are tested mostly through the root's public API (its
// tests); these check what a part promises by itself, on one shared Redis.
var sharedClient radix.Client

func TestMain(m *testing.M) {
	os.Exit(testkit.RunWithRedis(m, 16, func(_ string, c radix.Client) { sharedClient = c }))
}

// newShard is the one shard of a new queue named for t, AtLeastOnce, with the
// defaults of the root's Config.
func newShard(t testing.TB) *store.Shard {
	t.Helper()
	return store.NewShards(sharedClient, "consume-"+t.Name()+"-"+store.RandomID(), &store.Config{Layout: store.Levels(3),
		MaxAttempts: 10, PromoteBatch: 256, CallTimeout: 10 * time.Second, WaitTimeout: time.Second, Shards: 1,
		Mode: store.AtLeastOnce, Logger: slog.Default()})[0]
}

// pureShard is the one shard of a queue of layout l with no client, for
// tests of code that makes no Redis call.
func pureShard(l store.Layout) *store.Shard {
	return store.NewShards(nil, "pure", &store.Config{Layout: l, MaxAttempts: 10, PromoteBatch: 256,
		CallTimeout: 10 * time.Second, WaitTimeout: time.Second, Shards: 1, Logger: slog.Default()})[0]
}

// waitSignal waits for a signal on ch, failing t after d.
func waitSignal(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("no %s within %v", what, d)
	}
}

// run starts f until the test ends, and waits for it then.
func run(t *testing.T, f func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
