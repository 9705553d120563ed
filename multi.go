package prioq

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

	m := &multi{c: c, cfg: cfg, qcfg: qcfg, removed: map[string]bool{}, reservedNodes: map[string]bool{}}
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
	cons := newConsumerOf("multi", AtLeastOnce, ccfg, &m.qcfg, m.releaseNodes, func(cons *Consumer) consume.Source {
		m.report = cons.report
		m.eng = consume.NewMulti(c, consume.MultiOptions{ProbeInterval: cfg.ProbeInterval, Weighted: cfg.Weights != nil,
			Fetch: cons.cfg.fetchOptions(qcfg.CallTimeout), OnSweep: cons.cfg.OnSweep,
			Holding:     func(node string) func() { return holding(c, node) },
			OnCancelled: cons.renewSoon}, cons.bg, cons.report, cons.goBackground)
		return m.eng
	})
	for _, mq := range opened {
		m.eng.Add(mq)
	}
	cons.goBackground(m.eng.Run)
	if cfg.Pattern != "" {
		cons.goBackground(m.rescanLoop)
	}
	mc := &MultiConsumer{Consumer: cons, m: m}
	cons.startHeartbeat(c, "multi", cfg.Pattern, func() []string {
		names := mc.Queues()
		slices.Sort(names)
		return names
	})
	return mc, nil
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
	delete(mc.m.removed, name)
	mc.m.mu.Unlock()
	for _, mq := range opened {
		mc.m.eng.Add(mq)
	}
	return nil
}

// Remove stops serving the queue name, also when Pattern matches it (until
// Add). Messages of it already taken are still acked, retried and given back
// as usual.
func (mc *MultiConsumer) Remove(name string) {
	mc.m.mu.Lock()
	mc.m.removed[name] = true
	mc.m.mu.Unlock()
	mc.m.eng.Remove(name)
}

// Queues lists the queues served, in strict order.
func (mc *MultiConsumer) Queues() []string {
	return mc.m.eng.Names()
}

// multi is a MultiConsumer's root half: the queues it opens and the
// listener connections it reserves; internal/consume's Multi serves them.
type multi struct {
	c      Client
	cfg    MultiConfig
	qcfg   Config
	report func(error)
	eng    *consume.Multi

	mu            sync.Mutex
	removed       map[string]bool // by Remove: Pattern's rescans leave them out
	reservedNodes map[string]bool // nodes whose listener connection is reserved (pool.go)
	releases      []func()
}

// open opens the queues of names not served yet, openWorkers at a time.
// With strict, a queue that does not exist or is AtMostOnce fails it all.
func (m *multi) open(ctx context.Context, names []string, strict bool) ([]*consume.MultiQueue, error) {
	got := make([]*consume.MultiQueue, len(names))
	errs := make([]error, len(names))
	fanout.Each(len(names), openWorkers, func(i int) {
		if m.eng != nil && m.eng.Has(names[i]) {
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
		got[i] = &consume.MultiQueue{Name: q.name, Shards: q.shards, Nodes: q.ShardNodes, Weight: w}
	})
	if err := errors.Join(errs...); err != nil && strict {
		return nil, err
	}
	for _, err := range errs {
		if err != nil && m.report != nil {
			m.report(err)
		}
	}
	// In names' order: Multi.Add ranks them so.
	return slices.DeleteFunc(got, func(mq *consume.MultiQueue) bool { return mq == nil }), nil
}

// reserveNodes checks and reserves the listener connection of each node of
// mqs that has none yet (pool.go): one per node the queues live on, also
// for queues added later. ErrPoolTooSmall when the pool cannot hold it.
func (m *multi) reserveNodes(ctx context.Context, mqs []*consume.MultiQueue) error {
	m.mu.Lock()
	seen := map[string]bool{}
	var needs []blockingNeed
	for _, mq := range mqs {
		for i, node := range mq.Nodes() {
			if !seen[node] && !m.reservedNodes[node] {
				seen[node] = true
				needs = append(needs, blockingNeed{node: node, key: mq.Shards[i].Keys().SlotKey(), n: 1})
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
		for _, mq := range opened {
			m.eng.Add(mq)
		}
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
