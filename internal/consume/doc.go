// Package consume is what a prioq consumer runs, over internal/store: a
// fetcher over a Source (one shard, the fan-in of a sharded queue, the many
// queues of a MultiConsumer), the wait for work, and the background loops
// (the promoter, the sweeper, a MultiConsumer's listener). Each part is its
// own file with its Options and a test signal: a channel a test can wait on
// instead of sleeping.
//
// It imports internal/store and never the root package (layout_rules_test.go
// in the root checks it); the root's Consumer and MultiConsumer are facades
// over it.
package consume

import (
	"context"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// MetaEvery is how many idle rounds of the sweeper (or of the promoter) go by
// between checks that the queue's meta key is still there.
const MetaEvery = 6

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool { return store.SleepCtx(ctx, d) }

// signal sends on ch without blocking (nil: nobody listens): a test signal.
func signal(ch chan<- struct{}) {
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}
