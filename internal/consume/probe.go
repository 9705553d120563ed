package consume

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// promote runs u's promotions now and sets its timer for the next due time.
// What it made ready is taken from at once: its announcement may never come
// (a user without channel permissions).
func (m *Multi) promote(u *unit) {
	u.mu.Lock()
	if u.promoting || u.removed {
		u.mu.Unlock()
		return
	}
	u.promoting = true
	u.mu.Unlock()
	defer func() { u.mu.Lock(); u.promoting = false; u.mu.Unlock() }()
	var next time.Duration
	var err error
	for {
		// As promoteDue, counting what moved.
		var moved int
		cctx, cancel := context.WithTimeout(m.bg, u.s.Config().CallTimeout)
		moved, next, _, err = u.s.Promote(cctx)
		cancel()
		if moved > 0 {
			m.markReady(u)
		}
		if err != nil || moved < u.s.Config().PromoteBatch {
			break
		}
	}
	if err != nil {
		if m.bg.Err() == nil {
			m.report(err)
		}
		next = m.opts.Fetch.RetryInterval
	}
	m.promoteIn(u, next)
}

// promoteIn sets u's promotion timer to d from now (d < 0: none).
func (m *Multi) promoteIn(u *unit, d time.Duration) {
	if d < 0 || m.bg.Err() != nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	at := time.Now().Add(d)
	if u.due != nil {
		if !u.dueAt.IsZero() && u.dueAt.After(time.Now()) && !u.dueAt.After(at) {
			return // an earlier promotion is set: it learns what comes next
		}
		u.due.Stop()
	}
	if u.removed {
		return
	}
	u.dueAt = at
	u.due = time.AfterFunc(d, func() {
		u.mu.Lock()
		u.dueAt = time.Time{}
		u.mu.Unlock()
		m.promote(u)
	})
}

// Run is the probe loop, until ctx ends: see probeLoop.
func (m *Multi) Run(ctx context.Context) { m.probeLoop(ctx) }

// probeLoop probes every served shard every ProbeInterval: it marks those
// with ready work, sets promotion timers and sweeps expired leases. The
// calls of one round are spread over the interval, so that none holds the
// server long. Every round reads the lanes too (work whose wake-up a killed
// consumer took is found within one ProbeInterval, as a missed announcement
// is), and every metaEvery-th round the queues' meta keys.
func (m *Multi) probeLoop(ctx context.Context) {
	defer m.stopAll()
	defer m.startOnce.Do(func() { close(m.started) })
	m.firstRound(ctx)
	// The calls keep a fixed schedule, each chunk probed exactly every
	// ProbeInterval (the bound the README gives, and no more calls a second
	// than chunks per interval), from a random phase, so that consumers
	// started together do not probe together.
	next := time.Now().Add(rand.N(m.opts.ProbeInterval/time.Duration(max(len(m.chunks()), 1)) + 1))
	for round := 1; ctx.Err() == nil; round++ {
		chunks := m.chunks()
		gap := m.opts.ProbeInterval / time.Duration(max(len(chunks), 1))
		if len(chunks) == 0 {
			gap = m.opts.ProbeInterval
		}
		moved := false
		for _, units := range chunks {
			if !sleepCtx(ctx, time.Until(next)) {
				return
			}
			next = next.Add(gap)
			unreadable, err := m.probe(ctx, units, round%MetaEvery == 0)
			if err != nil && ctx.Err() == nil {
				m.report(err)
			}
			moved = moved || unreadable || err != nil && strings.Contains(err.Error(), "non local key")
		}
		if moved {
			m.resync(ctx) // a slot moves or moved: probe it on its new node from the next round
		}
		if len(chunks) == 0 {
			if !sleepCtx(ctx, time.Until(next)) {
				return
			}
			next = next.Add(gap)
		}
		if behind := time.Since(next); behind > m.opts.ProbeInterval {
			next = time.Now() // calls slower than their schedule: no burst to catch up
		}
	}
}

// firstRound probes every served shard back to back, every node, and marks
// what it found before the first take (fetch waits for started): the probes
// of several nodes (or chunks) are separate calls, and marked as each
// returns, a later queue in strict order could be taken from first. Then it
// promotes and sweeps what is due.
func (m *Multi) firstRound(ctx context.Context) {
	var found []probeFound
	moved := false
	for _, units := range m.chunks() {
		f, err := m.probeRead(ctx, units, true)
		if err != nil {
			if ctx.Err() == nil {
				m.report(err)
			}
			moved = moved || strings.Contains(err.Error(), "non local key")
			continue
		}
		found = append(found, f)
	}
	for _, f := range found {
		moved = m.mark(f) || moved
	}
	m.startOnce.Do(func() { close(m.started) })
	for _, f := range found {
		m.act(ctx, f)
	}
	if moved {
		m.resync(ctx)
	}
}

func (m *Multi) stopAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mq := range m.queues {
		for _, u := range mq.units {
			u.mu.Lock()
			if u.due != nil {
				u.due.Stop()
			}
			u.mu.Unlock()
		}
	}
}

// chunks splits the served shards by node, probeChunk at a time.
func (m *Multi) chunks() [][]*unit {
	m.mu.Lock()
	defer m.mu.Unlock()
	var all []*unit
	for _, mq := range m.queues {
		all = append(all, mq.units...)
	}
	return chunkByNode(all)
}

// chunkByNode groups units by node, in calls of at most probeChunk: what one
// probe call can read. Callers hold multi.mu (it reads unit.node).
func chunkByNode(units []*unit) [][]*unit {
	byNode := map[string][]*unit{}
	for _, u := range units {
		byNode[u.node] = append(byNode[u.node], u)
	}
	var out [][]*unit
	for _, us := range byNode {
		for i := 0; i < len(us); i += probeChunk {
			out = append(out, us[i:min(i+probeChunk, len(us))])
		}
	}
	return out
}

// probe runs probe.lua over units (all of one node), reading their lanes
// too and, with metas, whether their queues' meta keys are there, and acts
// on what it found (probeRead, mark, act). It reports unreadable when some
// shard could not be read on that node (its slot is being moved, or moved):
// that shard is left alone until the next probe, the others are served.
func (m *Multi) probe(ctx context.Context, units []*unit, metas bool) (unreadable bool, err error) {
	f, err := m.probeRead(ctx, units, metas)
	if err != nil {
		return false, err
	}
	unreadable = m.mark(f)
	m.act(ctx, f)
	return unreadable, nil
}

// probeFound is what one probe call read: res per probe.lua, of units.
type probeFound struct {
	units []*unit
	res   []store.Probed
	now   int64 // the server's, ms
	metas bool  // the meta keys were read (those of queues of one shard)
}

// status is unit i's status in f (probe.lua): "" read, "m" its meta key is
// missing, "x" unreadable.
func (f probeFound) status(i int) string { return f.res[i].Status }

// probeRead runs probe.lua over units (all of one node).
func (m *Multi) probeRead(ctx context.Context, units []*unit, metas bool) (probeFound, error) {
	shards := make([]*store.Shard, len(units))
	for i, u := range units {
		shards[i] = u.s
	}
	cctx, cancel := context.WithTimeout(ctx, m.opts.Fetch.CallTimeout)
	defer cancel()
	res, now, err := store.Probe(cctx, m.c, shards, metas)
	if err != nil {
		return probeFound{}, fmt.Errorf("prioq: multi consumer: probe of %d shards: %w", len(units), err)
	}
	return probeFound{units: units, res: res, now: now, metas: metas}, nil
}

// mark marks every shard of f with work ready at once, before any promotion
// or sweep (round trips each): marked one by one, the first marked could be
// taken from before an earlier queue in strict order was marked. It returns
// whether a shard was unreadable.
func (m *Multi) mark(f probeFound) (unreadable bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	marked := false
	for i, u := range f.units {
		if f.status(i) == "x" {
			// Unreadable here: a take, a promotion or a sweep would be
			// refused (TRYAGAIN) until the slot is whole on one node, and
			// a take waits out its deadline meanwhile; the next probe
			// tries again.
			unreadable = true
			if t := time.Now().Add(m.opts.ProbeInterval); u.downUntil.Before(t) {
				u.downUntil = t
			}
			continue
		}
		if f.res[i].Ready && m.queues[u.mq.Name] == u.mq {
			m.ready[u] = struct{}{}
			u.readyGen++
			marked = true
		}
	}
	if marked {
		m.kickLocked()
	}
	return unreadable
}

// act does what f says is due: it puts back lost meta keys, promotes (or
// sets the promotion timers) and sweeps expired leases.
func (m *Multi) act(ctx context.Context, f probeFound) {
	for i, u := range f.units {
		status := f.status(i)
		if status == "x" {
			continue
		}
		if status == "m" || f.metas && len(u.mq.Shards) > 1 && u.s == u.mq.Shards[0] {
			// A restart without persistence lost the queue's meta key:
			// put it back from what the queue was opened with, as a
			// Consumer's sweeper does (KeepMeta), so that Open and
			// ListQueues (Pattern) see the queue again. (A queue of
			// several shards: one call each time, as the sweeper's.)
			u.s.KeepMeta(ctx, m.report)
		}
		due, lease, gdue := f.res[i].Due, f.res[i].Lease, f.res[i].GDue
		// A group parked at its rate limit comes back by a promotion too
		// (promote.lua): the earlier of the two times.
		if g, err := strconv.ParseFloat(gdue, 64); err == nil {
			if d, err := strconv.ParseFloat(due, 64); err != nil || g < d {
				due = gdue
			}
		}
		if d, err := strconv.ParseFloat(due, 64); err == nil {
			if wait := time.Duration(int64(d)-f.now) * time.Millisecond; wait <= 0 {
				m.promote(u)
			} else {
				m.promoteIn(u, wait)
			}
		}
		if l, err := strconv.ParseFloat(lease, 64); err == nil && int64(l) <= f.now && SweepExpired(ctx, u.s, m.opts.OnSweep, m.report) > 0 {
			m.markReady(u)
		}
	}
}

// announced handles a message on channel ch.
func (m *Multi) announced(ch, what string) {
	m.mu.Lock()
	u := m.byChan[ch]
	m.mu.Unlock()
	if u == nil {
		return
	}
	switch what {
	case store.AnnounceResumed:
		m.mu.Lock()
		u.pausedUntil = time.Time{}
		m.mu.Unlock()
		m.markReady(u)
	case store.AnnounceReady:
		m.markReady(u)
	case store.AnnounceDue:
		go m.promote(u)
	case store.AnnounceCancelled:
		if m.opts.OnCancelled != nil {
			m.opts.OnCancelled()
		}
	}
}

// resync refreshes a Cluster client's view of the slots (the listener's and
// the probe's connections are its own, so radix does not see the MOVED
// replies they get) and regroups.
func (m *Multi) resync(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, m.opts.Fetch.CallTimeout)
	_ = store.SyncTopology(sctx, m.c)
	cancel()
	m.regroup()
}

// regroup finds the node of every served shard again (after a slot moved or
// a node failed) and moves subscriptions to the listeners of their nodes.
func (m *Multi) regroup() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mq := range m.queues {
		nodes := mq.Nodes()
		for i, u := range mq.units {
			if nodes[i] == u.node {
				continue
			}
			if l := m.listeners[u.node]; l != nil {
				l.unsubscribe(u.s.Keys().Wake())
			}
			u.node = nodes[i]
			m.listenerLocked(u.node).subscribe(u.s.Keys().Wake()) // and probed once subscribed
		}
	}
}

// probeChannels probes the shards of channels (just subscribed), and has
// the running deliveries renewed at once: a cancel announced before the
// subscription took (a message the first probe found, cancelled while its
// channel was being subscribed) went unheard, and the renewal finds it.
func (m *Multi) probeChannels(chans []string) {
	if m.opts.OnCancelled != nil && len(chans) > 0 {
		m.opts.OnCancelled()
	}
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
		if _, err := m.probe(m.bg, part, false); err != nil && m.bg.Err() == nil {
			m.report(err)
		}
	}
}
