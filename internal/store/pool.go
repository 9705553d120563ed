package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// pool.go: holding connections of a radix pool at once, for the root's
// check that a pool can hold a consumer's blocking connections (the root's
// pool.go says why and how many).

// Borrow takes want connections of key's pool at the same time, holds them
// until all are there or wait has passed, and returns how many it got. A
// node that does not answer (down, refusing) says nothing of the pool's
// size: then it returns want.
func Borrow(ctx context.Context, c Client, key string, want int, wait time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var got atomic.Int64
	var failed atomic.Bool // a call failed for another reason than the wait
	all := make(chan struct{})
	var wg sync.WaitGroup
	for range want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Do(ctx, radix.WithConn(key, func(ctx context.Context, _ radix.Conn) error {
				if got.Add(1) == int64(want) {
					close(all)
				}
				select {
				case <-all:
				case <-ctx.Done():
				}
				return nil
			}))
			if err != nil && ctx.Err() == nil {
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	nudge(c, key, want)
	if failed.Load() {
		// The node did not answer (down, refusing): that says nothing of
		// the pool's size, and a consumer must be able to start while a
		// node is down. Its waits fail and retry meanwhile.
		return want
	}
	return int(got.Load())
}

// nudge takes and puts back a connection of key's pool n+256 times, one
// after another (no I/O: well under a millisecond). radix v4.1.4 wakes one waiting shared call per connection put
// back; calls that began to wait while Borrow held every free connection
// would otherwise wait until their deadline although the pool is free again.
func nudge(c Client, key string, n int) {
	for range n + 256 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = c.Do(ctx, radix.WithConn(key, func(context.Context, radix.Conn) error { return nil }))
		cancel()
	}
}
