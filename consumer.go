package prioq

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/consume"
	"github.com/prioq/prioq/internal/store"
)

// Consumer takes messages from one queue. Receive, ReceiveBatch and Run may be
// called from several goroutines; they share one fetch in progress at a time,
// so a consumer holds at most two blocking connections of the client's pool at
// once (its fetch and its promoter's wait). Size a radix pool for 2 per
// consumer plus what the rest of the program uses.
//
// A consumer runs these parts, each in a file of its name with the Redis calls
// it makes:
//   - the fetcher: one fetch at a time for Receive, ReceiveBatch and Run (a
//     take, or a blocking pop, and the wait for a wake-up in between), and
//     the give-back of what it fetched but never handed out; an AtLeastOnce
//     take is merged with the queue's other consumers' takes in flight
//     (without Weights, same Lease: see internal/store/take.go);
//   - the promoter, unless NoPromoter: moves due delayed messages into their
//     lanes, sleeping until the next due time;
//   - the sweeper (AtLeastOnce): gives expired leases back to their lanes;
//   - Run's workers (run.go), when Run is called.
//
// Acks (Run's included) are merged queue-wide with the acks in flight at the
// same time (lease.go).
//
// The promoter and the sweeper start with the consumer. Close stops them in
// this order: no fetch starts any more; the wake-up wait, the promoter and the
// sweeper are cancelled; the fetch in progress ends (an AtMostOnce pop runs to
// its end, so that nothing it pops is lost); messages fetched but not handed
// out are given back; the promoter and the sweeper return. Each step is
// bounded by Close's ctx. A take queued behind another consumer's and not sent
// yet is dropped at once; one sent is waited for, and what it took given back.
type Consumer struct {
	q    *Queue // nil for a MultiConsumer's
	cfg  ConsumerConfig
	name string  // for errors and logs: the queue's name, or "multi"
	mode Mode    // its queues'
	qcfg *Config // its queue's (CallTimeout, Logger)

	bg     context.Context // ends on Close: background work and AtLeastOnce waits
	stop   context.CancelFunc
	bgDone sync.WaitGroup

	fetcher *consume.Fetcher

	releasePool func() // gives back its blocking connections' reservation (pool.go)

	id    string      // random: its poke keys' (fanin.go) and its name in the worker registry
	stats workerStats // what its heartbeat reports (workers.go)

	// renewNow asks Run's renewer to renew at once (renewSoon).
	renewNow chan struct{}
}

// NewConsumer returns a consumer of q and starts its background work.
// Durations between 0 and MinDuration are refused with ErrInvalidOption.
func (q *Queue) NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	mode := q.cfg.Mode
	if q.shards[0].Lists() {
		// An AtMostOnce consumer of a Range queue (format 4) waits on the
		// wake-up, which Close interrupts at once, not in a pop that Close
		// must wait out: the longer wait of AtLeastOnce suits it.
		mode = AtLeastOnce
	}
	cfg = cfg.withDefaults(mode)
	if cfg.Weights != nil && len(q.shards) > 1 {
		return nil, fmt.Errorf("%w: Weights need a queue of one shard", ErrInvalidOption)
	}
	if cfg.Weights != nil {
		if n := q.layout().Lanes(); len(cfg.Weights) != n {
			return nil, fmt.Errorf("%w: %d weights for %d lanes", ErrInvalidOption, len(cfg.Weights), n)
		}
		for _, w := range cfg.Weights {
			if w < 0 {
				return nil, fmt.Errorf("%w: negative weight %d", ErrInvalidOption, w)
			}
		}
	}
	release, err := reserveBlocking(context.Background(), q.shards[0].Client(), fmt.Sprintf("a consumer of %q", q.name), q.blockingNeeds(cfg))
	if err != nil {
		return nil, err
	}
	c := newConsumerOf(q.name, q.cfg.Mode, cfg, &q.cfg, release, func(c *Consumer) consume.Source {
		opts := c.cfg.fetchOptions(q.cfg.CallTimeout)
		if len(q.shards) == 1 {
			return consume.NewShardSource(q.shards[0], opts, c.bg, c.report)
		}
		return consume.NewFanIn(q.shards, opts, c.bg, c.report)
	})
	c.q = q
	fanIn, sharded := c.fetcher.Source().(*consume.FanIn)
	id := c.id // the consumer's poke keys' (internal/consume/waiter.go)
	for i, s := range q.shards {
		var due chan struct{} // the shard's waiter tells its promoter (sharded)
		if sharded && !cfg.NoPromoter {
			due = make(chan struct{}, 1)
		}
		if sharded {
			c.goBackground(consume.NewWaiter(fanIn, i, due, s.Keys().Poke(id)).Run)
		}
		// The meta key is the queue's: shard 0's loops keep it.
		if !cfg.NoPromoter {
			p := &consume.Promoter{S: s, Opts: c.cfg.promoterOptions(), Report: c.report, KeepsMeta: i == 0, Woken: due}
			c.goBackground(p.Run)
		}
		if q.cfg.Mode == AtLeastOnce {
			w := &consume.Sweeper{S: s, Opts: c.cfg.sweeperOptions(), Report: c.report, KeepsMeta: i == 0}
			c.goBackground(w.Run)
		}
	}
	c.startHeartbeat(q.shards[0].Client(), "consumer", "", func() []string { return []string{q.name} })
	if !cfg.NoHeartbeat {
		c.goBackground(q.recordHistory)
	}
	return c, nil
}

// newConsumerOf starts a consumer named name (its queue's, or "multi") of
// mode, whose fetcher takes from the Source that src makes for it: a
// Consumer and a MultiConsumer are the same fetcher over another Source.
func newConsumerOf(name string, mode Mode, cfg ConsumerConfig, qcfg *Config, release func(), src func(*Consumer) consume.Source) *Consumer {
	c := &Consumer{cfg: cfg, name: name, mode: mode, qcfg: qcfg, releasePool: release, id: store.RandomID(),
		renewNow: make(chan struct{}, 1)}
	c.bg, c.stop = context.WithCancel(context.Background())
	c.fetcher = consume.NewFetcher(src(c), c.cfg.fetchOptions(qcfg.CallTimeout), c.bg, c.report)
	return c
}

// blockingNeeds says how many blocking connections a consumer of q with cfg
// holds at most, per node: a queue of one shard waits for work (a blocking pop
// or the wake-up) and, unless NoPromoter, for the sched marker; a queue of
// several waits once per shard (internal/consume/waiter.go).
func (q *Queue) blockingNeeds(cfg ConsumerConfig) []blockingNeed {
	nodes := q.ShardNodes()
	byNode := map[string]int{}
	var out []blockingNeed
	for i, s := range q.shards {
		n := 1
		if len(q.shards) == 1 && !cfg.NoPromoter {
			n = 2
		}
		j, seen := byNode[nodes[i]]
		if !seen {
			j = len(out)
			byNode[nodes[i]] = j
			out = append(out, blockingNeed{node: nodes[i], key: s.Keys().SlotKey()})
		}
		out[j].n += n
	}
	if !accountable(q.shards[0].Client()) {
		return out
	}
	blockingMu.Lock()
	for i, s := range q.shards {
		s.CountBlocking(&usesOf(s.Client(), nodes[i]).inUse)
	}
	blockingMu.Unlock()
	return out
}

func (c *Consumer) goBackground(f func(context.Context)) {
	c.bgDone.Add(1)
	go func() {
		defer c.bgDone.Done()
		f(c.bg)
	}()
}

func (c *Consumer) report(err error) {
	if err == nil {
		return
	}
	c.qcfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "prioq: background error",
		slog.String("queue", c.name), slog.Any("error", err))
	if c.cfg.OnError != nil {
		c.cfg.OnError(err)
	}
}

// Receive blocks until a message is ready or ctx is done and returns it. On
// ctx done it returns ctx.Err() and takes nothing for the caller: a message
// that a fetch in progress takes after that is kept by the consumer for the
// next Receive, or put back at the head of its lane by Close. AtLeastOnce: a
// kept message is handed out only if it was kept for less than a tenth of
// its lease; one kept longer is given back (to the head of its lane, this
// delivery not counted; nothing if its lease has ended and it was delivered
// again meanwhile) and Receive takes again, so a kept message never reaches
// a caller near or after the end of its lease.
//
// AtMostOnce: the message left Redis when it was popped; if this process dies
// before handling it, it is lost. AtLeastOnce: the message is leased; Ack,
// Retry or Extend it before the lease ends.
func (c *Consumer) Receive(ctx context.Context) (*Message, error) {
	msgs, err := c.ReceiveBatch(ctx, 1)
	if err != nil {
		return nil, err
	}
	return msgs[0], nil
}

// ReceiveBatch is Receive for up to n messages (at least one, at most
// MaxBatch however large n is), in priority order, in one round trip.
// AtLeastOnce fills the batch from lane after lane (in the drawn order with
// Weights); an AtMostOnce batch comes from the highest non-empty lane only
// (one blocking pop), except on a Range queue of format 4, whose AtMostOnce
// takes are scripts that fill it as AtLeastOnce does. Cancelling ctx works as for Receive: it returns ctx.Err() and
// takes nothing for the caller.
func (c *Consumer) ReceiveBatch(ctx context.Context, n int) ([]*Message, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: ReceiveBatch(%d)", ErrInvalidOption, n)
	}
	ds, err := c.fetcher.Receive(ctx, min(n, MaxBatch))
	c.stats.delivered.Add(int64(len(ds)))
	return messagesOf(ds), err
}

// Close stops the consumer: it ends its background work, waits for a fetch in
// progress (an AtMostOnce pop on the lanes may take up to BlockTimeout; a wait
// on the wake-up ends at once), and gives back messages fetched but never
// handed out, in one round trip: AtMostOnce ones to the head of their lane,
// AtLeastOnce ones by ending their lease, without counting the attempt.
// Messages already handed out are the caller's to Ack.
//
// Close returns when ctx ends at the latest, with an error saying which step
// did not finish. Nothing held is lost for that, whatever ctx it gets (even
// one already ended): the give-back runs with a deadline of its own
// (Config.CallTimeout) and goes on after Close returns; a fetch still running
// gives back what it takes when it ends (within BlockTimeout); background
// work still in a Redis call ends at that call's deadline.
func (c *Consumer) Close(ctx context.Context) error {
	running, first := c.fetcher.Close()
	if !first {
		return nil
	}
	defer c.releasePool()
	if !consume.PopsLanes(c.fetcher.Source()) {
		// Interrupts the wake-up wait (AtLeastOnce, and AtMostOnce of a
		// Range queue or of several shards): a wake-up is a hint, put back
		// if it was popped in that instant, and a take already sent is
		// waited for. A blocking pop on the lanes is not interrupted: what
		// it pops exists nowhere else.
		c.stop()
	}
	fail := func(step string) error {
		return fmt.Errorf("prioq: close consumer of %q: %s: %w", c.name, step, ctx.Err())
	}
	if running != nil {
		select {
		case <-running:
		case <-ctx.Done():
			c.stop()
			return fail("fetch still running")
		}
	}
	c.stop()
	var err error
	if held := c.fetcher.TakeHeld(); len(held) > 0 {
		// A give-back of its own: Close's ctx may end, or have ended, and an
		// AtMostOnce message exists nowhere else.
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.qcfg.CallTimeout)
		gave := make(chan error, 1)
		go func() {
			defer cancel()
			err := c.fetcher.GiveBack(gctx, held)
			if err != nil && ctx.Err() != nil {
				c.report(err) // Close returned already: this is the only place to say it
			}
			gave <- err
		}()
		select {
		case err = <-gave:
		case <-ctx.Done():
			err = fail(fmt.Sprintf("giving back %d messages (it goes on)", len(held)))
		}
	}
	stopped := make(chan struct{})
	go func() { c.bgDone.Wait(); c.fetcher.WaitReleases(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		if err == nil {
			err = fail("promoter or sweeper still in a Redis call")
		}
	}
	return err
}

// promoterOptions are what a promoter reads of cfg.
func (cfg *ConsumerConfig) promoterOptions() consume.PromoterOptions {
	return consume.PromoterOptions{Wait: cfg.PromoteWait, RetryInterval: cfg.RetryInterval}
}

// sweeperOptions are what a sweeper reads of cfg.
func (cfg *ConsumerConfig) sweeperOptions() consume.SweeperOptions {
	return consume.SweeperOptions{Interval: cfg.SweepInterval, OnSweep: cfg.OnSweep}
}

// fetchOptions are what a fetcher and its source read of cfg.
func (cfg *ConsumerConfig) fetchOptions(callTimeout time.Duration) consume.FetchOptions {
	return consume.FetchOptions{Lease: cfg.Lease, BlockTimeout: cfg.BlockTimeout, RetryInterval: cfg.RetryInterval,
		Weights: cfg.Weights, CallTimeout: callTimeout}
}
