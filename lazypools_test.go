package prioq

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// countingDialer dials like radix's default and counts the connections.
func countingDialer(n *atomic.Int64) radix.Dialer {
	return radix.Dialer{CustomConn: func(ctx context.Context, network, addr string) (radix.Conn, error) {
		n.Add(1)
		return radix.Dialer{}.Dial(ctx, network, addr)
	}}
}

// A lazy pool opens nothing until its first call; many first calls at once
// open one pool; closing it closes that pool, and later calls fail at once.
func TestLazyPoolOpensOnFirstCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var dials atomic.Int64
	cfg := LazyPools(radix.PoolConfig{Size: 3, PingInterval: -1, Dialer: countingDialer(&dials)})
	p, err := cfg.New(ctx, "tcp", testAddr)
	require.NoError(t, err)
	assert.Equal(t, testAddr, p.Addr().String())
	assert.Equal(t, "tcp", p.Addr().Network())
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, int64(0), dials.Load(), "nothing dialled before the first call")

	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pong string
			errs[i] = p.Do(ctx, radix.Cmd(&pong, "PING"))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return dials.Load() == 3 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, int64(3), dials.Load(), "one pool of Size connections, not one per first caller")

	require.NoError(t, p.Close())
	err = p.Do(ctx, radix.Cmd(nil, "PING"))
	assert.Error(t, err, "a call after Close fails")
}

// Closing a lazy pool that was never called returns at once and dials
// nothing: what radix does, under its lock, with the pools it made in vain.
func TestLazyPoolNeverCalledClosesAtOnce(t *testing.T) {
	var dials atomic.Int64
	cfg := LazyPools(radix.PoolConfig{Size: 32, Dialer: countingDialer(&dials)})
	p, err := cfg.New(context.Background(), "tcp", testAddr)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, p.Close())
	assert.Less(t, time.Since(start), 50*time.Millisecond)
	err = p.Do(context.Background(), radix.Cmd(nil, "PING"))
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.Equal(t, int64(0), dials.Load())
}

// A node that cannot be reached fails the calls that try it, each within its
// own deadline, and a caller that gave up does not fail the next one.
func TestLazyPoolUnreachableNode(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	p, err := LazyPools(radix.PoolConfig{Size: 2}).New(context.Background(), "tcp", addr)
	require.NoError(t, err, "made without dialling")
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	assert.Error(t, p.Do(ctx, radix.Cmd(nil, "PING")))
	assert.Error(t, p.Do(ctx, radix.Cmd(nil, "PING")), "tried again, and fails again")
}
