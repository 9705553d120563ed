package prioq

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool { return store.SleepCtx(ctx, d) }

// BackoffFunc returns how long to wait before the next attempt of a message
// that has had `attempts` deliveries (1 after the first failure).
type BackoffFunc func(attempts int) time.Duration

// ExponentialBackoff doubles from base per attempt up to maxDelay, with "full
// jitter" in the upper half ([d/2, d)), so retries of many messages failing
// together spread out instead of arriving in waves. Any base and maxDelay are
// safe: the doubling stops at maxDelay without overflowing, and a negative
// value counts as 0.
func ExponentialBackoff(base, maxDelay time.Duration) BackoffFunc {
	base, maxDelay = max(base, 0), max(maxDelay, 0)
	return func(attempts int) time.Duration {
		d := min(base, maxDelay)
		for i := 1; i < attempts && d > 0 && d < maxDelay; i++ {
			if d > maxDelay/2 {
				d = maxDelay
			} else {
				d *= 2
			}
		}
		if d <= 1 {
			return d
		}
		return d/2 + rand.N(d/2)
	}
}
