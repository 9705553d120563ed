package prioq

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/mediocregopher/radix/v4/resp"
)

// The defaults of DialerConfig.
const (
	// DefaultConnectTimeout is DialerConfig.ConnectTimeout's default.
	DefaultConnectTimeout = 5 * time.Second

	// DefaultKeepAlive is DialerConfig.KeepAlive's default: an idle dead
	// connection is closed within about 20 s.
	DefaultKeepAlive = 5 * time.Second

	// DefaultUserTimeout is DialerConfig.UserTimeout's default.
	DefaultUserTimeout = 10 * time.Second

	// DefaultStuckAfter is DialerConfig.StuckAfter's default.
	DefaultStuckAfter = 5 * time.Second
)

// DialerConfig configures Dialer. The zero value of every field selects its default.
type DialerConfig struct {
	// Base carries radix's own dial settings: AuthUser, AuthPass, SelectDB,
	// Protocol, WriteFlushInterval, NewRespOpts. Its NetDialer and CustomConn
	// are replaced.
	Base radix.Dialer

	// ConnectTimeout bounds opening a connection. Defaults to
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration

	// KeepAlive is how long a connection may be idle before the kernel sends
	// a TCP keepalive probe, and the time between probes; after 3 unanswered
	// probes the kernel closes the connection. Defaults to DefaultKeepAlive.
	KeepAlive time.Duration

	// UserTimeout is how long data sent on a connection may stay
	// unacknowledged before the kernel closes the connection
	// (TCP_USER_TIMEOUT; Linux only, ignored elsewhere). Defaults to
	// DefaultUserTimeout.
	UserTimeout time.Duration

	// StuckAfter is how long a call may still wait on a connection after its
	// context ended before the connection is closed as dead. A call queued
	// behind a slow command (a long script, a fork) waits too, and closing the
	// connection fails every other call on it, so keep this above the longest
	// command the server runs. Defaults to DefaultStuckAfter.
	StuckAfter time.Duration

	// TLS, when set, makes connections use TLS with this configuration (its
	// ServerName defaults to the host dialed).
	TLS *tls.Config
}

func (c DialerConfig) withDefaults() DialerConfig {
	orDefault(&c.ConnectTimeout, DefaultConnectTimeout)
	orDefault(&c.KeepAlive, DefaultKeepAlive)
	orDefault(&c.UserTimeout, DefaultUserTimeout)
	orDefault(&c.StuckAfter, DefaultStuckAfter)
	return c
}

// Dialer returns a radix.Dialer whose connections do not outlive their peer.
// Use it for the pools prioq runs on (PoolConfig.Dialer, also inside a
// ClusterConfig or SentinelConfig):
//
//	client, err := radix.PoolConfig{Dialer: prioq.Dialer(prioq.DialerConfig{})}.New(ctx, "tcp", addr)
//
// A connection whose peer vanished without a reset (a NAT that forgot it, a
// host that lost power, a network partition) is "half-open": writes seem to
// succeed and no reply ever comes. radix v4.1.4 keeps such a connection in its
// pool after a call on it timed out, and later calls on it wait past their own
// deadlines until TCP gives up, about 15 minutes later. Connections from this
// dialer end sooner, three ways:
//   - TCP keepalive after KeepAlive idle, so an idle dead connection is closed
//     by the kernel within about 4×KeepAlive;
//   - TCP_USER_TIMEOUT (Linux), so a connection with unacknowledged data is
//     closed by the kernel after UserTimeout;
//   - a call still waiting on the connection StuckAfter after its context
//     ended (it is queued behind a reply that does not come) closes the
//     connection, which ends every call waiting on it and makes the pool dial
//     a new one; a call that timed out also sends a PING with that bound.
//
// Every prioq call returns at its deadline whatever the client does; this
// dialer is what makes the pool heal instead of keeping a dead connection.
//
// A duration of cfg above 0 and below MinDuration makes every dial fail with
// ErrInvalidOption, so the pool's New reports it.
func Dialer(cfg DialerConfig) radix.Dialer {
	bad := minDurations(map[string]time.Duration{"ConnectTimeout": cfg.ConnectTimeout, "KeepAlive": cfg.KeepAlive,
		"UserTimeout": cfg.UserTimeout, "StuckAfter": cfg.StuckAfter})
	cfg = cfg.withDefaults()
	base := cfg.Base
	base.CustomConn = nil
	base.NetDialer = hiddenKeepAlive{d: &net.Dialer{
		Timeout: cfg.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: cfg.KeepAlive, Interval: cfg.KeepAlive, Count: 3,
		},
		Control: userTimeoutControl(cfg.UserTimeout),
	}, tls: cfg.TLS}
	return radix.Dialer{CustomConn: func(ctx context.Context, network, addr string) (radix.Conn, error) {
		if bad != nil {
			return nil, bad
		}
		ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
		conn, err := base.Dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &guardConn{Conn: conn, stuckAfter: cfg.StuckAfter}, nil
	}}
}

// hiddenKeepAlive dials with its net.Dialer (and TLS, if set) and hides the
// keepalive setters of the connection, so that radix does not replace the
// dialer's keepalive settings with its own (10 s idle, 10 s interval, 9
// probes: 100 s).
type hiddenKeepAlive struct {
	d   *net.Dialer
	tls *tls.Config
}

func (h hiddenKeepAlive) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := h.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if h.tls != nil {
		cfg := h.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	return struct{ net.Conn }{c}, nil
}

// guardConn closes its radix connection when a call is still waiting on it
// stuckAfter after the call's context ended: radix returns promptly for the
// call whose reply it is reading, so a call that waits longer is queued behind
// a reply that does not come.
type guardConn struct {
	radix.Conn
	stuckAfter time.Duration
	probing    atomic.Bool
}

func (g *guardConn) Do(ctx context.Context, a radix.Action) error { return a.Perform(ctx, g) }

func (g *guardConn) EncodeDecode(ctx context.Context, m, u interface{}) error {
	if ctx.Done() == nil {
		return g.Conn.EncodeDecode(ctx, m, u)
	}
	finished := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(g.stuckAfter)
		defer t.Stop()
		select {
		case <-finished:
		case <-t.C:
			g.Conn.Close()
		}
	})
	err := g.Conn.EncodeDecode(ctx, m, u)
	close(finished)
	stop()
	if err != nil && ctx.Err() != nil && errors.As(err, new(resp.ErrConnUsable)) {
		// The reply did not come in time. radix keeps the connection and
		// discards the late reply in the background; find out now whether it
		// ever comes, rather than at the next call.
		go g.probe()
	}
	return err
}

// probe sends a PING bounded like any call: on a dead connection it waits
// behind the reply that does not come, and the guard closes the connection.
func (g *guardConn) probe() {
	if !g.probing.CompareAndSwap(false, true) {
		return
	}
	defer g.probing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), g.stuckAfter)
	defer cancel()
	_ = g.Do(ctx, radix.Cmd(nil, "PING"))
}
