package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// redisClient is what the three kinds of client (pool, Sentinel, Cluster)
// have in common.
type redisClient interface {
	Do(context.Context, radix.Action) error
	Close() error
}

// connectTimeout bounds connecting and the first PING.
const connectTimeout = 5 * time.Second

// connect opens a client for the URL and checks that Redis answers.
func connect(ctx context.Context, raw string) (redisClient, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, bad("bad --url %q: want redis://host:port, rediss://, redis+sentinel:// or redis+cluster://", redact(raw))
	}
	dc := prioq.DialerConfig{}
	if u.User != nil {
		dc.Base.AuthUser = u.User.Username()
		dc.Base.AuthPass, _ = u.User.Password()
		if _, set := u.User.Password(); !set { // redis://password@host
			dc.Base.AuthUser, dc.Base.AuthPass = "", u.User.Username()
		}
	}
	p := strings.Trim(u.Path, "/")
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var client redisClient
	switch u.Scheme {
	case "redis", "rediss":
		if u.Scheme == "rediss" {
			dc.TLS = &tls.Config{ServerName: u.Hostname()}
			// A TLS handshake with a server that does not speak TLS waits
			// until the deadline and radix says only that: try it first,
			// and say what went wrong.
			if err := checkTLS(cctx, u.Host, dc.TLS); err != nil {
				return nil, bad("cannot reach Redis at %s: %v", u.Redacted(), err)
			}
		}
		if p != "" {
			if _, err := strconv.Atoi(p); err != nil {
				return nil, bad("bad database %q in --url", p)
			}
			dc.Base.SelectDB = p
		}
		var pool radix.Client
		pool, err = radix.PoolConfig{Size: 4, Dialer: prioq.Dialer(dc)}.New(cctx, "tcp", u.Host)
		client = pool
	case "redis+sentinel":
		if p == "" {
			return nil, bad("redis+sentinel:// needs the master's name as its path")
		}
		var sc *radix.Sentinel
		sc, err = (radix.SentinelConfig{PoolConfig: radix.PoolConfig{Size: 4, Dialer: prioq.Dialer(dc)}}).New(cctx, p, strings.Split(u.Host, ","))
		client = sc
	case "redis+cluster":
		var cl *radix.Cluster
		cl, err = (radix.ClusterConfig{PoolConfig: prioq.LazyPools(radix.PoolConfig{Size: 4, Dialer: prioq.Dialer(dc)})}).New(cctx, strings.Split(u.Host, ","))
		client = cl
	default:
		return nil, bad("unknown --url scheme %q", u.Scheme)
	}
	if err != nil {
		return nil, bad("cannot reach Redis at %s: %v", u.Redacted(), err)
	}
	if err := client.Do(cctx, radix.Cmd(nil, "PING")); err != nil {
		client.Close()
		return nil, bad("cannot reach Redis at %s: %v", u.Redacted(), err)
	}
	return client, nil
}

// redact hides a password in a URL that did not parse.
func redact(raw string) string {
	if i, j := strings.Index(raw, "://"), strings.LastIndex(raw, "@"); i >= 0 && j > i {
		return raw[:i+3] + "…" + raw[j:]
	}
	return raw
}

// checkTLS makes a TLS handshake with addr and says, when it fails, that
// it is TLS that failed and, when the server answers a plain PING, that it
// does not serve TLS on that port.
func checkTLS(ctx context.Context, addr string, cfg *tls.Config) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err // not TLS's fault
	}
	defer conn.Close()
	hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	tc := tls.Client(conn, cfg)
	err = tc.HandshakeContext(hctx)
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = errors.New("no TLS answer within 3s")
	}
	if plain(ctx, addr) {
		return fmt.Errorf("TLS handshake failed (%v): the server answers in plain text, it does not serve TLS on this port (redis:// is for plain)", err)
	}
	return fmt.Errorf("TLS handshake failed: %v", err)
}

// plain reports whether addr answers a plain-text PING as Redis does.
func plain(ctx context.Context, addr string) bool {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") || strings.HasPrefix(line, "-ERR"))
}

// queueNames returns the names of the queues on c that match pattern, a
// glob whose "*" matches any characters, "/" included (prioq.ListQueues).
func queueNames(ctx context.Context, c redisClient, pattern string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	names, err := prioq.ListQueues(ctx, c, pattern)
	if errors.Is(err, prioq.ErrInvalidOption) {
		return nil, bad("%v", strings.TrimPrefix(err.Error(), "prioq: invalid option: "))
	}
	return names, err
}
