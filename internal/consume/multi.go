package consume

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// MultiOptions configure a Multi (the root's MultiConfig holds them).
type MultiOptions struct {
	// ProbeInterval is how often every queue is probed. 0:
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	// Weighted serves the queues with ready work in a draw by their
	// MultiQueue.Weight; otherwise in strict order (the order of Add).
	Weighted bool
	// Fetch: the takes' Lease, the BlockTimeout of a fetch nobody waits for
	// any more, RetryInterval, CallTimeout.
	Fetch FetchOptions
	// OnSweep is told of the sweeps of expired leases that did something.
	OnSweep func(redelivered, deadLettered int)
	// Holding, when set, counts a listener's connection as in use on its
	// node while it is held (the root's pool accounting); it returns the
	// function that ends the count.
	Holding func(node string) (done func())
	// OnCancelled, when set, is told that a delivery in flight of a served
	// queue was cancelled (Queue.Cancel's announcement): the root's renewer
	// renews at once.
	OnCancelled func()
}

// DefaultProbeInterval is MultiOptions.ProbeInterval's default (the root's
// DefaultProbeInterval: a root test keeps them equal).
const DefaultProbeInterval = 2 * time.Second

// probeChunk is how many shards one probe call reads: about a millisecond
// of the server's time with 10,000 queues under load, ~50 µs when they are
// idle.
const probeChunk = 500

// NewMulti is the engine of a MultiConsumer on client c; bg ends on its
// Close, goBg runs background work that Close waits for. Run starts its
// probe loop; Add serves queues.
func NewMulti(c store.Client, opts MultiOptions, bg context.Context, report func(error), goBg func(func(context.Context))) *Multi {
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	opts.Fetch = opts.Fetch.withDefaults()
	return &Multi{c: c, opts: opts, bg: bg, report: report, goBg: goBg, kick: make(chan struct{}, 1),
		queues: map[string]*MultiQueue{}, byChan: map[string]*unit{}, ready: map[*unit]struct{}{},
		listeners: map[string]*listener{}, warned: map[string]bool{}, intN: rand.IntN, started: make(chan struct{})}
}

// Add serves mq, after the queues served already in strict order (nothing if
// a queue of its name is served).
func (m *Multi) Add(mq *MultiQueue) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addLocked(mq)
}

// Has reports whether the queue name is served.
func (m *Multi) Has(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, have := m.queues[name]
	return have
}

// Names lists the queues served, in strict order.
func (m *Multi) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	mqs := make([]*MultiQueue, 0, len(m.queues))
	for _, mq := range m.queues {
		mqs = append(mqs, mq)
	}
	slices.SortFunc(mqs, func(a, b *MultiQueue) int { return a.rank - b.rank })
	out := make([]string, len(mqs))
	for i, mq := range mqs {
		out[i] = mq.Name
	}
	return out
}

// Remove stops serving the queue name.
func (m *Multi) Remove(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeLocked(name)
}

// SetIntN replaces the draws of pick (rand.IntN): a test's seeded ones. Set
// it before the first fetch.
func (m *Multi) SetIntN(f func(int) int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.intN = f
}

// Started is closed once the first probe round has marked what it found: a
// test signal (the first take waits for it too).
func (m *Multi) Started() <-chan struct{} { return m.started }

// Multi is a MultiConsumer's engine and Source: the queues served, which of
// their shards may have ready work, and one listener per node. The root's
// MultiConsumer opens the queues (and reserves the listeners' connections);
// Multi serves them.
type Multi struct {
	c      store.Client
	opts   MultiOptions
	bg     context.Context
	report func(error)
	kick   chan struct{} // a shard became ready
	goBg   func(func(context.Context))

	mu        sync.Mutex
	queues    map[string]*MultiQueue
	byChan    map[string]*unit // a shard's channel (its wake-up key) -> shard
	ready     map[*unit]struct{}
	listeners map[string]*listener // by node ("" without a cluster)
	nextRank  int

	warned map[string]bool // permission refusals reported (refusedChannel), by kind
	intN   func(int) int   // pick's draws (under mu): rand.IntN; seeded in tests

	started   chan struct{} // closed after the first probe round marked what it found (firstRound)
	startOnce sync.Once
}

// MultiQueue is a queue a Multi serves: its name, shards, where they live
// (Nodes: the node of each shard now; the root's Queue.ShardNodes), and its
// weight (MultiOptions.Weighted).
type MultiQueue struct {
	Name   string
	Shards []*store.Shard
	Nodes  func() []string
	Weight int

	rank  int // strict order
	units []*unit
}

// unit is one shard of a served queue.
type unit struct {
	mq   *MultiQueue
	s    *store.Shard
	node string

	// Under multi.mu:
	readyGen    int       // counts markReady calls: a take's "drained" does not undo a later one
	pausedUntil time.Time // a take found it paused: not taken from again before then
	downUntil   time.Time // a take failed: left alone until then

	mu        sync.Mutex
	removed   bool        // by Remove: its promotions stop
	due       *time.Timer // the next promotion
	dueAt     time.Time   // when due fires (zero once it fired)
	promoting bool
}

// addLocked serves mq: its shards join their node's listener, which
// subscribes to their channels, and are probed at once.
func (m *Multi) addLocked(mq *MultiQueue) {
	if _, have := m.queues[mq.Name]; have {
		return
	}
	mq.rank = m.nextRank
	m.nextRank++
	m.queues[mq.Name] = mq
	nodes := mq.Nodes()
	for i, s := range mq.Shards {
		u := &unit{mq: mq, s: s, node: nodes[i]}
		mq.units = append(mq.units, u)
		m.byChan[s.Keys().Wake()] = u
		// Work that predates the subscription: the listener probes the
		// shard once it is subscribed.
		m.listenerLocked(u.node).subscribe(s.Keys().Wake())
	}
}

func (m *Multi) removeLocked(name string) {
	mq := m.queues[name]
	if mq == nil {
		return
	}
	delete(m.queues, name)
	for _, u := range mq.units {
		delete(m.byChan, u.s.Keys().Wake())
		delete(m.ready, u)
		if l := m.listeners[u.node]; l != nil {
			l.unsubscribe(u.s.Keys().Wake())
		}
		u.mu.Lock()
		u.removed = true
		if u.due != nil {
			u.due.Stop()
		}
		u.mu.Unlock()
	}
}

func (m *Multi) kickLocked() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// markReady says u may have ready work (an announcement, a probe, a take that
// left work behind).
func (m *Multi) markReady(u *unit) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.queues[u.mq.Name] != u.mq {
		return // removed
	}
	m.ready[u] = struct{}{}
	u.readyGen++
	m.kickLocked()
}

// refusedChannel reports, once per MultiConsumer and kind (the channel, or
// the SSUBSCRIBE command itself), that the node refused to subscribe to ch
// for the user's ACL permissions (NOPERM, err), and what to grant. The
// shards of refused channels are served by the probe alone; the listener
// tries again every refusedRetry, without reporting again.
func (m *Multi) refusedChannel(ch string, err error) {
	kind := "channel"
	if !strings.Contains(strings.ToLower(store.ReplyText(err)), "channel") {
		kind = "command"
	}
	m.mu.Lock()
	first := !m.warned[kind]
	m.warned[kind] = true
	queue := ""
	if u := m.byChan[ch]; u != nil {
		queue = u.mq.Name
	}
	m.mu.Unlock()
	if !first {
		return
	}
	grant := "the shard channels &prioq:* and &prioq/* (ACL SETUSER <user> '&prioq:*' '&prioq/*', or allchannels)"
	if kind == "command" {
		grant = "the commands SSUBSCRIBE, SUNSUBSCRIBE and SPUBLISH (+@pubsub, or each by name)"
	}
	m.report(fmt.Errorf("prioq: multi consumer: the Redis user may not subscribe to %q, the channel of queue %q (%w): "+
		"grant it %s. Until then the queues refused are served by the probe alone: their work is found within "+
		"ProbeInterval (%v) instead of at once. Said once; a refused subscription is tried again every %v",
		ch, queue, err, grant, m.opts.ProbeInterval, refusedRetry))
}

// holding counts a listener's connection to node as in use (Holding).
func (m *Multi) holding(node string) (done func()) {
	if m.opts.Holding == nil {
		return func() {}
	}
	return m.opts.Holding(node)
}

func (m *Multi) listenerLocked(node string) *listener {
	l := m.listeners[node]
	if l == nil {
		l = newListener(node, m, listenerOptions{c: m.c, callTimeout: m.opts.Fetch.CallTimeout,
			retryInterval: m.opts.Fetch.RetryInterval, holding: m.holding, bg: m.bg, report: m.report})
		m.listeners[node] = l
		m.goBg(l.run)
	}
	return l
}

// pick chooses the shard to take from: the first ready queue in strict order,
// or a queue drawn by weight among those with a ready shard (each queue's
// weight counts once, however many of its shards are ready); among a
// queue's ready shards, any. nil when none is ready. When none is, it
// returns how long until the first ready queue left alone for a while (a
// failure, a pause, its rate limit) is back (0: none is).
func (m *Multi) pick() (*unit, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var best []*unit                     // strict order: the ready shards of the first queue
	byQueue := map[*MultiQueue][]*unit{} // weights: the ready shards of each queue
	var queues []*MultiQueue             // weights: byQueue's keys, in the order met
	var back time.Duration
	total := 0
	for u := range m.ready {
		if now.Before(u.downUntil) || now.Before(u.pausedUntil) {
			t := u.downUntil
			if u.pausedUntil.After(t) {
				t = u.pausedUntil
			}
			if d := t.Sub(now); back == 0 || d < back {
				back = d
			}
			continue
		}
		if !m.opts.Weighted {
			if len(best) > 0 && u.mq.rank > best[0].mq.rank {
				continue
			}
			if len(best) > 0 && u.mq.rank < best[0].mq.rank {
				best = best[:0]
			}
			best = append(best, u)
			continue
		}
		if byQueue[u.mq] == nil {
			queues = append(queues, u.mq)
			total += u.mq.Weight
		}
		byQueue[u.mq] = append(byQueue[u.mq], u)
	}
	if !m.opts.Weighted {
		if len(best) == 0 {
			return nil, back
		}
		return best[m.intN(len(best))], 0
	}
	if len(queues) == 0 {
		return nil, back
	}
	// Weight 0 is served only when no queue of weight above 0 has work.
	chosen := queues[m.intN(len(queues))]
	if total > 0 {
		r := m.intN(total)
		for _, mq := range queues {
			if r < mq.Weight {
				chosen = mq
				break
			}
			r -= mq.Weight
		}
	}
	us := byQueue[chosen]
	return us[m.intN(len(us))], 0
}

// Fetch is a MultiConsumer's Source (internal/consume's fetcher): take from a ready shard;
// when none is, wait in the process for an announcement, a probe or the
// fetch's end (BlockTimeout with nobody waiting any more).
func (m *Multi) Fetch(n int, wanted func() bool) ([]*store.Delivery, error) {
	// The first take waits for the first probe round (firstRound), at most
	// a ProbeInterval: strict order from the first message.
	select {
	case <-m.started:
	default:
		t := time.NewTimer(m.opts.ProbeInterval)
		select {
		case <-m.started:
		case <-m.bg.Done():
			t.Stop()
			return nil, store.ErrClosed
		case <-t.C:
		}
		t.Stop()
	}
	idle := time.NewTimer(m.opts.Fetch.BlockTimeout)
	defer idle.Stop()
	for {
		u, back := m.pick()
		if u == nil {
			// A shard left alone after a failure may be back within a
			// second; one at its rate limit, when its next message is due.
			wait := time.Second
			if back > 0 {
				wait = min(wait, back)
			}
			select {
			case <-m.bg.Done():
				return nil, store.ErrClosed
			case <-m.kick:
			case <-idle.C:
				if !wanted() {
					return nil, nil
				}
				idle.Reset(m.opts.Fetch.BlockTimeout)
			case <-time.After(wait):
			}
			continue
		}
		m.mu.Lock()
		gen := u.readyGen
		m.mu.Unlock()
		// Not derived from the consumer's context: a take abandoned by Close
		// would lease a message nobody holds until its lease ran out.
		// A queue whose slot is moving is left alone soon (its refusal is
		// not retried until CallTimeout: the other queues are served
		// meanwhile), as one whose call fails.
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.Fetch.CallTimeout)
		r, err := u.s.Take(store.WithRedirectBudget(ctx, store.RedirectBudget),
			store.TakeArgs{Lanes: u.s.Keys().HighFirst(), N: n, Lease: m.opts.Fetch.Lease, Top: true, ClaimWake: true, Guess: true})
		cancel()
		m.mu.Lock()
		switch {
		case err != nil:
			u.downUntil = time.Now().Add(m.opts.Fetch.RetryInterval)
		case r.Paused:
			// Writes to a paused queue go on announcing it: without this,
			// each would cost a take. Resume announces itself.
			u.pausedUntil = time.Now().Add(m.opts.ProbeInterval)
		case r.Limited > 0:
			// At its rate limit: left alone, still ready, until its next
			// message may be taken.
			u.pausedUntil = time.Now().Add(r.Limited)
		case !r.HasTop && u.readyGen == gen:
			// Drained (or paused): the next announcement brings it back.
			// One that came during the take was for work it may not have
			// seen: the shard stays ready then.
			delete(m.ready, u)
		}
		m.mu.Unlock()
		if err != nil {
			if !store.MovedAway(err) {
				m.report(err)
			}
			continue
		}
		for _, d := range r.Dropped {
			m.report(d)
		}
		if len(r.Deliveries) > 0 {
			return r.Deliveries, nil
		}
	}
}
