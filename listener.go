package prioq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// listener is a MultiConsumer's one connection to one node: subscribed
// (SSUBSCRIBE) to the channel of every served shard on that node, it hands
// announcements to the multi. It holds one connection of the node's pool for
// as long as the consumer runs, and always gives it back closed: a
// subscribed connection must not serve other calls.
type listener struct {
	m    *multi
	node string

	mu      sync.Mutex
	key     string          // a key on the node: how to get a connection of its pool
	want    map[string]bool // channels it should be subscribed to
	changed chan struct{}   // want changed
}

// listenRead is how long one read waits before the listener looks at its
// subscriptions again; listenPing how often an idle connection is checked.
const (
	listenRead = 200 * time.Millisecond
	listenPing = 10 * time.Second
)

// errListenerDone ends a listener's connection: never nil, so that radix
// closes it instead of putting a subscribed connection back in the pool.
var errListenerDone = errors.New("prioq: listener done")

// errListenerIdle: every channel of the node was unsubscribed; the
// connection goes back (closed) until one is wanted again.
var errListenerIdle = errors.New("prioq: listener idle")

// errSlotMoved: the node dropped a subscription by itself, because the
// channel's slot moved to another node.
var errSlotMoved = errors.New("prioq: a served shard's slot moved")

func (m *multi) listenerLocked(node string) *listener {
	l := m.listeners[node]
	if l == nil {
		l = &listener{m: m, node: node, want: map[string]bool{}, changed: make(chan struct{}, 1)}
		m.listeners[node] = l
		m.goBg(l.run)
	}
	return l
}

func (l *listener) subscribe(ch string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.key == "" {
		l.key = ch
	}
	l.want[ch] = true
	l.poke()
}

func (l *listener) unsubscribe(ch string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.want, ch)
	if l.key == ch {
		// It routed the connection: a channel it still wants routes it to
		// the same node (and none: the listener idles).
		l.key = ""
		for k := range l.want {
			l.key = k
			break
		}
	}
	l.poke()
}

func (l *listener) poke() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// run keeps the listener connected until ctx ends; after a failure, it waits
// RetryInterval, finds where the shards live now, and connects again.
func (l *listener) run(ctx context.Context) {
	for ctx.Err() == nil {
		l.mu.Lock()
		key := l.key
		l.mu.Unlock()
		if key == "" { // nothing to listen to on this node (any more)
			select {
			case <-ctx.Done():
				return
			case <-l.changed:
			}
			continue
		}
		err := l.m.c.Do(ctx, radix.WithConn(key, l.serve))
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errListenerIdle) {
			continue
		}
		if !errors.Is(err, errSlotMoved) {
			l.m.report(fmt.Errorf("prioq: multi consumer: listening on %q: %w", l.node, err))
		}
		if !sleepCtx(ctx, l.m.ccfg.RetryInterval) {
			return
		}
		l.m.resync(ctx)
	}
}

// serve is one connection's life: subscribe to every wanted channel, probe
// (what was announced before the subscription is found that way), then read
// announcements and follow changes of what is wanted.
func (l *listener) serve(ctx context.Context, conn radix.Conn) error {
	defer holding(l.m.c, l.node)()
	have := map[string]bool{}
	dropping := map[string]bool{} // unsubscribed by us: their confirmation is not a move
	send := func(cmd, ch string) error {
		wctx, cancel := context.WithTimeout(ctx, l.m.qcfg.CallTimeout)
		defer cancel()
		return conn.EncodeDecode(wctx, []string{cmd, ch}, nil)
	}
	sync := func() error {
		l.mu.Lock()
		var add, drop []string
		for ch := range l.want {
			if !have[ch] {
				add = append(add, ch)
			}
		}
		for ch := range have {
			if !l.want[ch] {
				drop = append(drop, ch)
			}
		}
		l.mu.Unlock()
		for _, ch := range add {
			if err := send("SSUBSCRIBE", ch); err != nil {
				return err
			}
			have[ch] = true
		}
		for _, ch := range drop {
			if err := send("SUNSUBSCRIBE", ch); err != nil {
				return err
			}
			delete(have, ch)
			dropping[ch] = true
		}
		if len(add) > 0 {
			go l.m.probeChannels(add)
		}
		return nil
	}
	if err := sync(); err != nil {
		return err
	}
	heard, pinged := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return errListenerDone
		case <-l.changed:
			if err := sync(); err != nil {
				return err
			}
			if len(have) == 0 {
				return errListenerIdle
			}
		default:
		}
		if l.m.bg.Err() != nil {
			return errListenerDone
		}
		rctx, cancel := context.WithTimeout(ctx, listenRead)
		var r []string
		err := conn.EncodeDecode(rctx, nil, &r)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			switch {
			case time.Since(heard) > 3*listenPing:
				return fmt.Errorf("no reply to PING for %v", time.Since(heard).Round(time.Second))
			case time.Since(pinged) > listenPing:
				if err := send("PING", ""); err != nil {
					return err
				}
				pinged = time.Now()
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return errListenerDone
			}
			return err
		}
		heard = time.Now()
		if len(r) < 2 {
			continue
		}
		switch r[0] {
		case "smessage":
			if len(r) == 3 {
				l.m.announced(r[1], r[2])
			}
		case "sunsubscribe":
			if dropping[r[1]] {
				delete(dropping, r[1])
				continue
			}
			// The node dropped it: its slot moved. Its work may be
			// anywhere now: probed after the regroup.
			return errSlotMoved
		}
	}
}

// resync refreshes a Cluster client's view of the slots (the listener's and
// the probe's connections are its own, so radix does not see the MOVED
// replies they get) and regroups.
func (m *multi) resync(ctx context.Context) {
	if cl, ok := m.c.(*radix.Cluster); ok {
		sctx, cancel := context.WithTimeout(ctx, m.qcfg.CallTimeout)
		_ = cl.Sync(sctx)
		cancel()
	}
	m.regroup()
}

// regroup finds the node of every served shard again (after a slot moved or
// a node failed) and moves subscriptions to the listeners of their nodes.
func (m *multi) regroup() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mq := range m.queues {
		nodes := mq.q.ShardNodes()
		for i, u := range mq.units {
			if nodes[i] == u.node {
				continue
			}
			if l := m.listeners[u.node]; l != nil {
				l.unsubscribe(u.s.k.wake)
			}
			u.node = nodes[i]
			m.listenerLocked(u.node).subscribe(u.s.k.wake) // and probed once subscribed
		}
	}
}

// probeChannels probes the shards of channels (just subscribed).
func (m *multi) probeChannels(chans []string) {
	m.mu.Lock()
	var units []*unit
	for _, ch := range chans {
		if u := m.byChan[ch]; u != nil {
			units = append(units, u)
		}
	}
	chunks := chunkByNode(units)
	m.mu.Unlock()
	for _, part := range chunks {
		if err := m.probe(m.bg, part, true); err != nil && m.bg.Err() == nil {
			m.report(err)
		}
	}
}
