// Package testkit holds what the root package's tests, the integration suite
// and the benchmark share to talk to a test Redis.
package testkit

import (
	"context"

	"github.com/mediocregopher/radix/v4"
	"github.com/mediocregopher/radix/v4/trace"
)

// Pool returns a radix pool on addr once it has opened all of its
// connections (ctx's error if it ends first): radix fills a pool in the background after New, and Close
// waits 100 ms for each connection that fill has not made yet. Pool pings are
// off, so that tests and benchmarks count only their own commands.
func Pool(ctx context.Context, addr string, size int, dialer radix.Dialer) (radix.Client, error) {
	filled := make(chan struct{})
	cl, err := radix.PoolConfig{Size: size, PingInterval: -1, Dialer: dialer, Trace: trace.PoolTrace{
		InitCompleted: func(trace.PoolInitCompleted) { close(filled) },
	}}.New(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	select {
	case <-filled:
		return cl, nil
	case <-ctx.Done():
		cl.Close()
		return nil, ctx.Err()
	}
}
