package prioq

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/mediocregopher/radix/v4"
)

// LazyPools returns pc for a radix Cluster client (ClusterConfig.PoolConfig)
// so that the pool of connections to a node is opened by the node's first
// call rather than when the client learns of the node. Use it for every
// Cluster client that serves queues while the cluster may change:
//
//	cl, err := radix.ClusterConfig{PoolConfig: prioq.LazyPools(radix.PoolConfig{Size: 32})}.New(ctx, addrs)
//
// Why: when a slot starts moving to a node the client has no pool for (a
// primary just added), radix v4.1.4 answers the ASK redirect by opening a
// pool in every goroutine redirected at once; all but the first then close
// theirs while holding the lock that every call of the client takes, and
// closing a pool that is still opening its connections takes 100 ms per
// connection. With Size 32 every call of the client, to any node, stopped
// for 3.1 s per pool closed that way (TestNewPrimaryDoesNotFreezeTheClient).
// A lazy pool that was never called closes at once.
//
// pc.CustomPool, when set, still makes each node's pool (on first use).
func LazyPools(pc radix.PoolConfig) radix.PoolConfig {
	inner := pc
	pc.CustomPool = func(_ context.Context, network, addr string) (radix.Client, error) {
		return &lazyPool{cfg: inner, network: network, addr: addr, opening: make(chan struct{}, 1)}, nil
	}
	return pc
}

// lazyPool is a radix pool opened by its first call.
type lazyPool struct {
	cfg           radix.PoolConfig
	network, addr string
	opening       chan struct{} // holds a token while a call opens the pool

	pool   atomic.Pointer[radix.Client]
	mu     sync.Mutex // guards closed, and pool against a Close
	closed bool
}

// open returns the pool, opening it when no call has yet: one call at a
// time tries, each with its own ctx, so a caller that gives up does not fail
// the others.
func (l *lazyPool) open(ctx context.Context) (radix.Client, error) {
	if p := l.pool.Load(); p != nil {
		return *p, nil
	}
	select {
	case l.opening <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-l.opening }()
	if p := l.pool.Load(); p != nil {
		return *p, nil
	}
	if l.isClosed() {
		return nil, l.errClosed()
	}
	p, err := l.cfg.New(ctx, l.network, l.addr)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		p.Close()
		return nil, l.errClosed()
	}
	l.pool.Store(&p)
	l.mu.Unlock()
	return p, nil
}

func (l *lazyPool) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *lazyPool) errClosed() error {
	return fmt.Errorf("prioq: pool of %s: %w", l.addr, net.ErrClosed)
}

// Do implements radix.Client.
func (l *lazyPool) Do(ctx context.Context, a radix.Action) error {
	p, err := l.open(ctx)
	if err != nil {
		return err
	}
	return p.Do(ctx, a)
}

// Addr implements radix.Client.
func (l *lazyPool) Addr() net.Addr { return lazyAddr{l.network, l.addr} }

// Close implements radix.Client: it closes the pool if a call opened it.
func (l *lazyPool) Close() error {
	l.mu.Lock()
	l.closed = true
	p := l.pool.Load()
	l.mu.Unlock()
	if p == nil {
		return nil
	}
	return (*p).Close()
}

type lazyAddr struct{ network, addr string }

func (a lazyAddr) Network() string { return a.network }
func (a lazyAddr) String() string  { return a.addr }
