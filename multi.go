package prioq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/consume"
	"github.com/prioq/prioq/internal/fanout"
	"github.com/prioq/prioq/internal/store"
)

// The defaults of MultiConfig.
const (
	// DefaultProbeInterval is MultiConfig.ProbeInterval's default.
	DefaultProbeInterval = 2 * time.Second
	// DefaultRescanInterval is MultiConfig.RescanInterval's default.
	DefaultRescanInterval = 10 * time.Second
	// probeChunk is how many shards one probe call reads: about a
	// millisecond of the server's time with 10,000 queues under load, ~50 µs
	// when they are idle.
	probeChunk = 500
	// openWorkers is how many queues a MultiConsumer opens at once.
	openWorkers = 16
)

// MultiConfig configures a MultiConsumer. Queues, Pattern or both name what it
// serves.
type MultiConfig struct {
	// Queues are served in this order when Weights is nil: a message of an
	// earlier queue is always taken before one of a later queue (strict),
	// whatever their priorities; within a queue, its priorities rule.
	Queues []string

	// Pattern, when set, adds every queue whose name matches it (path.Match
	// syntax: * ? [a-z], except that * and ? match "/" too), found at start and every RescanInterval, after
	// Queues in strict order, in name order among themselves.
	Pattern string

	// Weights, when set, serves the queues that have ready work in a
	// weighted random draw instead (a queue not named weighs 1; 0 is served
	// only when no other queue has work), as asynq's queue priorities do.
	Weights map[string]int

	// Consumer configures leases, Run's workers, retries and background work
	// as for a consumer of one queue; Weights (lane weights) and NoPromoter
	// are not supported here.
	Consumer ConsumerConfig

	// Queue configures the calls made on the queues (CallTimeout,
	// WaitReplicas, Logger, ...); their layout, mode and shards are read from
	// Redis, as OpenExisting does.
	Queue Config

	// ProbeInterval is how often every queue is probed (one call per 500
	// shards and node, spread over the interval): the due times and lease
	// deadlines it reads drive promotions and sweeps, and ready work that no
	// announcement told of (one missed, refused by the user's ACL, or a
	// wake-up taken by a consumer killed before its take) is found by it
	// within ProbeInterval. Every sixth probe also puts back the meta key of
	// a served queue that a restart without persistence lost. Defaults to
	// DefaultProbeInterval.
	ProbeInterval time.Duration

	// RescanInterval is how often Pattern is listed again (SCAN). Defaults
	// to DefaultRescanInterval.
	RescanInterval time.Duration
}

// MultiConsumer takes messages from many queues with a fixed number of
// connections: one per Redis node it reads from, subscribed to the queues'
// announcements (SPUBLISH on each shard's channel, made by every write that
// makes work ready: see internal/store/keys.go), however many queues it serves. It never
// waits on a queue with a blocking command: it takes (take.lua, a lease as
// for Consumer) from the queue an announcement or its probe says has work,
// and waits in the process otherwise. An announcement missed (a connection
// lost, a producer that died between its write and its announcement) costs
// at most ProbeInterval, never a stuck message.
//
// Receive, ReceiveBatch, Run and Close work as for Consumer (its methods);
// messages say their queue (Message.Queue), and Ack, Retry and Extend work on
// them as on any other. AtLeastOnce queues only, of any layout and number of
// shards (a queue's shards are served in turn, without the fan-in of
// Consumer; Redis >= 7.0).
type MultiConsumer struct {
	*Consumer
	m *multi
}

// NewMultiConsumer opens the queues cfg names (they must exist: see Open and
// `prioq create`) and starts serving them. ErrNotFound for a named queue that
// does not exist, ErrWrongMode for an AtMostOnce one. The first take waits
// for the first probe of every queue (one call per 500 shards and node, at
// most ProbeInterval), so that strict order holds from the first message.
//
// A queue's layout, mode and shards are read from its meta key. A restart of
// Redis without persistence loses it: a MultiConsumer (or Consumer) that
// serves the queue puts it back, but one started while it is missing fails
// with ErrNotFound for a named queue, and Pattern does not find the queue,
// until the queue is opened with Open (which writes it) or a consumer that
// served it puts it back.
func NewMultiConsumer(ctx context.Context, c Client, cfg MultiConfig) (*MultiConsumer, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	if len(cfg.Queues) == 0 && cfg.Pattern == "" {
		return nil, fmt.Errorf("%w: a MultiConsumer needs Queues or a Pattern", ErrInvalidOption)
	}
	if cfg.Pattern != "" {
		if _, err := store.NameGlob(cfg.Pattern); err != nil {
			return nil, err
		}
	}
	if cfg.Consumer.Weights != nil || cfg.Consumer.NoPromoter {
		return nil, fmt.Errorf("%w: a MultiConsumer takes no lane Weights and always promotes", ErrInvalidOption)
	}
	for name, w := range cfg.Weights {
		if w < 0 {
			return nil, fmt.Errorf("%w: negative weight %d for %q", ErrInvalidOption, w, name)
		}
	}
	if err := cfg.Consumer.validate(); err != nil {
		return nil, err
	}
	durs := map[string]time.Duration{"ProbeInterval": cfg.ProbeInterval, "RescanInterval": cfg.RescanInterval}
	if err := negatives(nil, durs); err != nil {
		return nil, err
	}
	if err := minDurations(durs); err != nil {
		return nil, err
	}
	qcfg, err := checkOpen(c, "multi", cfg.Queue)
	if err != nil {
		return nil, err
	}
	orDefault(&cfg.ProbeInterval, DefaultProbeInterval)
	orDefault(&cfg.RescanInterval, DefaultRescanInterval)
	ccfg := cfg.Consumer.withDefaults(AtLeastOnce)

	m := &multi{c: c, cfg: cfg, qcfg: qcfg, kick: make(chan struct{}, 1),
		queues: map[string]*multiQueue{}, byChan: map[string]*unit{}, ready: map[*unit]struct{}{},
		listeners: map[string]*listener{}, removed: map[string]bool{}, reservedNodes: map[string]bool{},
		warned: map[string]bool{}, intN: rand.IntN, started: make(chan struct{})}
	names := slices.Clone(cfg.Queues)
	if cfg.Pattern != "" {
		found, err := ListQueues(ctx, c, cfg.Pattern)
		if err != nil {
			return nil, fmt.Errorf("prioq: multi consumer: listing %q: %w", cfg.Pattern, err)
		}
		for _, n := range found {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	opened, err := m.open(ctx, names, true)
	if err != nil {
		return nil, err
	}

	if err := m.reserveNodes(ctx, opened); err != nil {
		return nil, err
	}
	cons := newConsumerOf("multi", AtLeastOnce, ccfg, &m.qcfg, m.releaseNodes, func(c *Consumer) consume.Source {
		m.ccfg, m.bg, m.report, m.goBg = &c.cfg, c.bg, c.report, c.goBackground
		return m
	})
	m.mu.Lock()
	for _, mq := range opened {
		m.addLocked(mq)
	}
	m.mu.Unlock()
	cons.goBackground(m.probeLoop)
	if cfg.Pattern != "" {
		cons.goBackground(m.rescanLoop)
	}
	return &MultiConsumer{Consumer: cons, m: m}, nil
}

// Add starts serving the queue name (it must exist), after those already
// served in strict order. Adding a queue served already does nothing.
func (mc *MultiConsumer) Add(ctx context.Context, name string) error {
	opened, err := mc.m.open(ctx, []string{name}, true)
	if err != nil {
		return err
	}
	if err := mc.m.reserveNodes(ctx, opened); err != nil {
		return err
	}
	mc.m.mu.Lock()
	defer mc.m.mu.Unlock()
	delete(mc.m.removed, name)
	for _, mq := range opened {
		mc.m.addLocked(mq)
	}
	return nil
}

// Remove stops serving the queue name, also when Pattern matches it (until
// Add). Messages of it already taken are still acked, retried and given back
// as usual.
func (mc *MultiConsumer) Remove(name string) {
	mc.m.mu.Lock()
	defer mc.m.mu.Unlock()
	mc.m.removeLocked(name)
}

// Queues lists the queues served, in strict order.
func (mc *MultiConsumer) Queues() []string {
	mc.m.mu.Lock()
	defer mc.m.mu.Unlock()
	mqs := make([]*multiQueue, 0, len(mc.m.queues))
	for _, mq := range mc.m.queues {
		mqs = append(mqs, mq)
	}
	slices.SortFunc(mqs, func(a, b *multiQueue) int { return a.rank - b.rank })
	out := make([]string, len(mqs))
	for i, mq := range mqs {
		out[i] = mq.q.name
	}
	return out
}

// multi is a MultiConsumer's state: the queues served, which of their shards
// may have ready work, and one listener per node.
type multi struct {
	c      Client
	cfg    MultiConfig
	qcfg   Config
	ccfg   *ConsumerConfig
	bg     context.Context
	report func(error)
	kick   chan struct{} // a shard became ready
	goBg   func(func(context.Context))

	mu        sync.Mutex
	queues    map[string]*multiQueue
	byChan    map[string]*unit // a shard's channel (its wake-up key) -> shard
	ready     map[*unit]struct{}
	listeners map[string]*listener // by node ("" without a cluster)
	removed   map[string]bool      // by Remove: Pattern's rescans leave them out
	nextRank  int

	reservedNodes map[string]bool // nodes whose listener connection is reserved (pool.go)
	releases      []func()
	warned        map[string]bool // permission refusals reported (refusedChannel), by kind
	intN          func(int) int   // pick's draws (under mu): rand.IntN; seeded in tests

	started   chan struct{} // closed after the first probe round marked what it found (firstRound)
	startOnce sync.Once
}

type multiQueue struct {
	q      *Queue
	rank   int // strict order
	weight int
	units  []*unit
}

// unit is one shard of a served queue.
type unit struct {
	mq   *multiQueue
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

// open opens the queues of names not served yet, openWorkers at a time.
// With strict, a queue that does not exist or is AtMostOnce fails it all.
func (m *multi) open(ctx context.Context, names []string, strict bool) ([]*multiQueue, error) {
	got := make([]*multiQueue, len(names))
	errs := make([]error, len(names))
	fanout.Each(len(names), openWorkers, func(i int) {
		m.mu.Lock()
		_, have := m.queues[names[i]]
		m.mu.Unlock()
		if have {
			return
		}
		q, err := OpenExisting(ctx, m.c, names[i], m.qcfg)
		if errors.Is(err, ErrNotFound) {
			err = fmt.Errorf("prioq: multi consumer: %w (a MultiConsumer learns a queue's layout from its meta key: "+
				"one that a restart without persistence lost comes back when the queue is opened with Open, or a "+
				"Consumer or MultiConsumer already serving it puts it back)", err)
		}
		if err == nil && q.cfg.Mode != AtLeastOnce {
			err = fmt.Errorf("prioq: multi consumer: %w: %q is %s", ErrWrongMode, names[i], q.cfg.Mode)
		}
		if err != nil {
			errs[i] = err
			return
		}
		w := 1
		if x, ok := m.cfg.Weights[names[i]]; ok {
			w = x
		}
		got[i] = &multiQueue{q: q, weight: w}
	})
	if err := errors.Join(errs...); err != nil && strict {
		return nil, err
	}
	for _, err := range errs {
		if err != nil && m.report != nil {
			m.report(err)
		}
	}
	// In names' order: addLocked ranks them so.
	return slices.DeleteFunc(got, func(mq *multiQueue) bool { return mq == nil }), nil
}

// reserveNodes checks and reserves the listener connection of each node of
// mqs that has none yet (pool.go): one per node the queues live on, also
// for queues added later. ErrPoolTooSmall when the pool cannot hold it.
func (m *multi) reserveNodes(ctx context.Context, mqs []*multiQueue) error {
	m.mu.Lock()
	seen := map[string]bool{}
	var needs []blockingNeed
	for _, mq := range mqs {
		for i, node := range mq.q.ShardNodes() {
			if !seen[node] && !m.reservedNodes[node] {
				seen[node] = true
				needs = append(needs, blockingNeed{node: node, key: mq.q.shards[i].Keys().SlotKey(), n: 1})
			}
		}
	}
	m.mu.Unlock()
	if len(needs) == 0 {
		return nil
	}
	release, err := reserveBlocking(ctx, m.c, "a MultiConsumer", needs)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, nd := range needs {
		m.reservedNodes[nd.node] = true
	}
	m.releases = append(m.releases, release)
	return nil
}

// releaseNodes gives back every reservation (on Close).
func (m *multi) releaseNodes() {
	m.mu.Lock()
	releases := m.releases
	m.releases, m.reservedNodes = nil, map[string]bool{}
	m.mu.Unlock()
	for _, r := range releases {
		r()
	}
}

// addLocked serves mq: its shards join their node's listener, which
// subscribes to their channels, and are probed at once.
func (m *multi) addLocked(mq *multiQueue) {
	if _, have := m.queues[mq.q.name]; have {
		return
	}
	mq.rank = m.nextRank
	m.nextRank++
	m.queues[mq.q.name] = mq
	nodes := mq.q.ShardNodes()
	for i, s := range mq.q.shards {
		u := &unit{mq: mq, s: s, node: nodes[i]}
		mq.units = append(mq.units, u)
		m.byChan[s.Keys().Wake()] = u
		// Work that predates the subscription: the listener probes the
		// shard once it is subscribed.
		m.listenerLocked(u.node).subscribe(s.Keys().Wake())
	}
}

func (m *multi) removeLocked(name string) {
	m.removed[name] = true
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

func (m *multi) kickLocked() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// markReady says u may have ready work (an announcement, a probe, a take that
// left work behind).
func (m *multi) markReady(u *unit) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.queues[u.mq.q.name] != u.mq {
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
func (m *multi) refusedChannel(ch string, err error) {
	kind := "channel"
	if !strings.Contains(strings.ToLower(store.ReplyText(err)), "channel") {
		kind = "command"
	}
	m.mu.Lock()
	first := !m.warned[kind]
	m.warned[kind] = true
	queue := ""
	if u := m.byChan[ch]; u != nil {
		queue = u.mq.q.name
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
		ch, queue, err, grant, m.cfg.ProbeInterval, refusedRetry))
}

// announced handles a message on channel ch.
func (m *multi) announced(ch, what string) {
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
	}
}

// pick chooses the shard to take from: the first ready queue in strict order,
// or a queue drawn by weight among those with a ready shard (each queue's
// weight counts once, however many of its shards are ready); among a
// queue's ready shards, any. nil when none is ready. When none is, it
// returns how long until the first ready queue left alone for a while (a
// failure, a pause, its rate limit) is back (0: none is).
func (m *multi) pick() (*unit, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var best []*unit                     // strict order: the ready shards of the first queue
	byQueue := map[*multiQueue][]*unit{} // weights: the ready shards of each queue
	var queues []*multiQueue             // weights: byQueue's keys, in the order met
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
		if m.cfg.Weights == nil {
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
			total += u.mq.weight
		}
		byQueue[u.mq] = append(byQueue[u.mq], u)
	}
	if m.cfg.Weights == nil {
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
			if r < mq.weight {
				chosen = mq
				break
			}
			r -= mq.weight
		}
	}
	us := byQueue[chosen]
	return us[m.intN(len(us))], 0
}

// Fetch is a MultiConsumer's Source (internal/consume's fetcher): take from a ready shard;
// when none is, wait in the process for an announcement, a probe or the
// fetch's end (BlockTimeout with nobody waiting any more).
func (m *multi) Fetch(n int, wanted func() bool) ([]*store.Delivery, error) {
	// The first take waits for the first probe round (firstRound), at most
	// a ProbeInterval: strict order from the first message.
	select {
	case <-m.started:
	default:
		t := time.NewTimer(m.cfg.ProbeInterval)
		select {
		case <-m.started:
		case <-m.bg.Done():
			t.Stop()
			return nil, ErrClosed
		case <-t.C:
		}
		t.Stop()
	}
	idle := time.NewTimer(m.ccfg.BlockTimeout)
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
				return nil, ErrClosed
			case <-m.kick:
			case <-idle.C:
				if !wanted() {
					return nil, nil
				}
				idle.Reset(m.ccfg.BlockTimeout)
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
		ctx, cancel := context.WithTimeout(context.Background(), m.qcfg.CallTimeout)
		r, err := u.s.Take(store.WithRedirectBudget(ctx, store.RedirectBudget),
			store.TakeArgs{Lanes: u.s.Keys().HighFirst(), N: n, Lease: m.ccfg.Lease, Top: true, ClaimWake: true, Guess: true})
		cancel()
		m.mu.Lock()
		switch {
		case err != nil:
			u.downUntil = time.Now().Add(m.ccfg.RetryInterval)
		case r.Paused:
			// Writes to a paused queue go on announcing it: without this,
			// each would cost a take. Resume announces itself.
			u.pausedUntil = time.Now().Add(m.cfg.ProbeInterval)
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

// promote runs u's promotions now and sets its timer for the next due time.
// What it made ready is taken from at once: its announcement may never come
// (a user without channel permissions).
func (m *multi) promote(u *unit) {
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
		next = m.ccfg.RetryInterval
	}
	m.promoteIn(u, next)
}

// promoteIn sets u's promotion timer to d from now (d < 0: none).
func (m *multi) promoteIn(u *unit, d time.Duration) {
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

// probeLoop probes every served shard every ProbeInterval: it marks those
// with ready work, sets promotion timers and sweeps expired leases. The
// calls of one round are spread over the interval, so that none holds the
// server long. Every round reads the lanes too (work whose wake-up a killed
// consumer took is found within one ProbeInterval, as a missed announcement
// is), and every metaEvery-th round the queues' meta keys.
func (m *multi) probeLoop(ctx context.Context) {
	defer m.stopAll()
	defer m.startOnce.Do(func() { close(m.started) })
	m.firstRound(ctx)
	// The calls keep a fixed schedule, each chunk probed exactly every
	// ProbeInterval (the bound the README gives, and no more calls a second
	// than chunks per interval), from a random phase, so that consumers
	// started together do not probe together.
	next := time.Now().Add(rand.N(m.cfg.ProbeInterval/time.Duration(max(len(m.chunks()), 1)) + 1))
	for round := 1; ctx.Err() == nil; round++ {
		chunks := m.chunks()
		gap := m.cfg.ProbeInterval / time.Duration(max(len(chunks), 1))
		if len(chunks) == 0 {
			gap = m.cfg.ProbeInterval
		}
		moved := false
		for _, units := range chunks {
			if !sleepCtx(ctx, time.Until(next)) {
				return
			}
			next = next.Add(gap)
			unreadable, err := m.probe(ctx, units, round%consume.MetaEvery == 0)
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
		if behind := time.Since(next); behind > m.cfg.ProbeInterval {
			next = time.Now() // calls slower than their schedule: no burst to catch up
		}
	}
}

// firstRound probes every served shard back to back, every node, and marks
// what it found before the first take (fetch waits for started): the probes
// of several nodes (or chunks) are separate calls, and marked as each
// returns, a later queue in strict order could be taken from first. Then it
// promotes and sweeps what is due.
func (m *multi) firstRound(ctx context.Context) {
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

func (m *multi) stopAll() {
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
func (m *multi) chunks() [][]*unit {
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
func (m *multi) probe(ctx context.Context, units []*unit, metas bool) (unreadable bool, err error) {
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
func (m *multi) probeRead(ctx context.Context, units []*unit, metas bool) (probeFound, error) {
	shards := make([]*store.Shard, len(units))
	for i, u := range units {
		shards[i] = u.s
	}
	cctx, cancel := context.WithTimeout(ctx, m.qcfg.CallTimeout)
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
func (m *multi) mark(f probeFound) (unreadable bool) {
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
			if t := time.Now().Add(m.cfg.ProbeInterval); u.downUntil.Before(t) {
				u.downUntil = t
			}
			continue
		}
		if f.res[i].Ready && m.queues[u.mq.q.name] == u.mq {
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
func (m *multi) act(ctx context.Context, f probeFound) {
	for i, u := range f.units {
		status := f.status(i)
		if status == "x" {
			continue
		}
		if status == "m" || f.metas && len(u.mq.q.shards) > 1 && u.s == u.mq.q.shards[0] {
			// A restart without persistence lost the queue's meta key:
			// put it back from what the queue was opened with, as a
			// Consumer's sweeper does (keepMeta), so that Open and
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
		if l, err := strconv.ParseFloat(lease, 64); err == nil && int64(l) <= f.now && consume.SweepExpired(ctx, u.s, m.ccfg.OnSweep, m.report) > 0 {
			m.markReady(u)
		}
	}
}

// rescanLoop lists Pattern's queues every RescanInterval and serves new ones.
// (Queues deleted meanwhile stay served until Remove; their takes find
// nothing.)
func (m *multi) rescanLoop(ctx context.Context) {
	for sleepCtx(ctx, consume.Jitter(m.cfg.RescanInterval)) {
		names, err := ListQueues(ctx, m.c, m.cfg.Pattern)
		if err != nil {
			if ctx.Err() == nil {
				m.report(fmt.Errorf("prioq: multi consumer: listing %q: %w", m.cfg.Pattern, err))
			}
			continue
		}
		m.mu.Lock()
		names = slices.DeleteFunc(names, func(n string) bool { return m.removed[n] })
		m.mu.Unlock()
		opened, _ := m.open(ctx, names, false)
		if err := m.reserveNodes(ctx, opened); err != nil {
			m.report(fmt.Errorf("prioq: multi consumer: not serving %d new queues: %w", len(opened), err))
			continue
		}
		m.mu.Lock()
		for _, mq := range opened {
			m.addLocked(mq)
		}
		m.mu.Unlock()
	}
}

// ListQueues returns the names of the queues whose name matches pattern
// (path.Match syntax, except that * and ? match "/" too, so that "*" finds
// "team/alpha"; "" for all), sorted, found by SCAN of their meta keys on
// every primary (never KEYS).
func ListQueues(ctx context.Context, c Client, pattern string) ([]string, error) {
	match, err := store.NameGlob(pattern)
	if err != nil {
		return nil, err
	}
	return store.ScanQueues(ctx, c, match)
}
