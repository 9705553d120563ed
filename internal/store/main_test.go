package store

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit"
)

// The store's tests that need Redis share one (testkit.RunWithRedis); most
// of the Redis half of prioq is tested through the root's public API, in
// the root's tests.
var sharedClient radix.Client

func TestMain(m *testing.M) {
	os.Exit(testkit.RunWithRedis(m, 16, func(_ string, c radix.Client) { sharedClient = c }))
}

func newClient(testing.TB) radix.Client { return sharedClient }

// clientFunc is a Client made of a function, for tests without Redis.
type clientFunc func(context.Context, radix.Action) error

func (f clientFunc) Do(ctx context.Context, a radix.Action) error { return f(ctx, a) }

// pureShard is the shard of a queue of one shard with layout l and the
// defaults of the root's Config, with no client, for tests of code that
// makes no Redis call: any call it tried would panic.
func pureShard(l Layout) *Shard {
	return NewShards(nil, "pure", &Config{Layout: l, MaxAttempts: 10, PromoteBatch: 256, CallTimeout: 10 * time.Second,
		WaitTimeout: time.Second, Shards: 1, Logger: slog.Default()})[0]
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
