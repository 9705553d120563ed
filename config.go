package prioq

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// ConsumerConfig configures a Consumer. The zero value of every field selects
// its default; a duration above 0 and below MinDuration is refused.
type ConsumerConfig struct {
	// Concurrency is how many handlers Run runs at once. Defaults to
	// DefaultConcurrency.
	Concurrency int

	// Lease is how long a taken message stays invisible to other consumers
	// before it is delivered again (AtLeastOnce). Defaults to DefaultLease.
	Lease time.Duration

	// BlockTimeout is the server-side timeout of one blocking wait: an idle
	// consumer sends one command per BlockTimeout. Close of an AtMostOnce
	// consumer of one shard of Levels or RangeSorted may wait this long for a
	// pop in progress (a wait on the wake-up, what every other consumer
	// does, is interrupted at once). Defaults to DefaultBlockTimeout, or
	// DefaultBlockTimeoutAtMostOnce for an AtMostOnce queue (not a Range one:
	// its consumers wait on the wake-up, as AtLeastOnce ones do).
	BlockTimeout time.Duration

	// Weights, when set, replaces strict priority order by a weighted one: for
	// each fetch the lane order is drawn at random, lane i coming first with
	// probability proportional to Weights[i], so no lane with a weight above 0
	// starves. One weight per lane, lane 0 first; lanes with weight 0 come last,
	// highest first.
	Weights []int

	// NoPromoter turns off this consumer's promoter of delayed messages. At
	// least one process must promote for delayed messages to become ready.
	NoPromoter bool

	// PromoteWait is the server-side timeout of the promoter's wait for a
	// wake-up; after it the promoter re-reads the next due time (a safety
	// net: enqueues wake it when they schedule an earlier message). Defaults
	// to DefaultPromoteWait.
	PromoteWait time.Duration

	// SweepInterval is how often this consumer looks for expired leases
	// (AtLeastOnce). Defaults to DefaultSweepInterval, or Lease/2 when that
	// is shorter (but at least MinDuration).
	SweepInterval time.Duration

	// GracePeriod is how long Run waits, after its ctx is done, for handlers in
	// flight to finish before it cancels their contexts. Defaults to
	// DefaultGracePeriod.
	GracePeriod time.Duration

	// HandlerTimeout, when above 0, ends each Run handler's context after
	// this long, whatever its lease (context.Cause: ErrHandlerTimeout); the
	// message is then retried as after a handler error (an attempt counted,
	// dead-lettered after MaxAttempts), unless the handler finished it
	// itself. 0: no timeout but the lease's.
	HandlerTimeout time.Duration

	// NoRenew turns off the automatic renewal of leases under Run
	// (AtLeastOnce): a handler's context then ends at its lease deadline
	// unless the handler calls Extend. By default one goroutine per Run
	// renews the leases of all its running handlers every Lease/3, in one
	// call per shard, so a handler may run longer than Lease while its
	// process lives (and its context), and a process that dies leaves its
	// messages to be delivered again within one Lease (docs/guarantees.md).
	NoRenew bool

	// RetryInterval is how long background loops wait after a Redis error.
	// Defaults to DefaultRetryInterval.
	RetryInterval time.Duration

	// Middleware wraps the handler of every Run call, the first one
	// outermost: tracing, metrics, logging around each delivery. None by
	// default.
	Middleware []Middleware

	// OnSweep, when set, is called after each sweep that found expired
	// leases (AtLeastOnce), with how many it delivered again and how many it
	// moved to the dead letters: for metrics.
	OnSweep func(redelivered, deadLettered int)

	// Heartbeat is how often the consumer writes its record in the worker
	// registry (Workers, Queue.Workers: its host, process, queues,
	// concurrency, handlers running, messages delivered); the record lives
	// three heartbeats, so a consumer that dies leaves the registry then.
	// Defaults to DefaultHeartbeat. NoHeartbeat keeps the consumer out of
	// the registry.
	Heartbeat time.Duration

	// NoHeartbeat keeps the consumer out of the worker registry: for a
	// Redis user that may not write its keys (prioq:workers:*), or a
	// consumer that should not be seen. Such a consumer does not record
	// the queue's history either (Queue.History).
	NoHeartbeat bool

	// OnError receives errors of background work (promotion, sweeps, acks in
	// Run, handler errors of AtMostOnce messages). Defaults to dropping them.
	OnError func(error)
}

// validate refuses durations between 0 and MinDuration (0 or less selects
// a field's default).
func (c ConsumerConfig) validate() error {
	if err := negatives(map[string]int{"Concurrency": c.Concurrency}, map[string]time.Duration{
		"Lease": c.Lease, "BlockTimeout": c.BlockTimeout, "PromoteWait": c.PromoteWait,
		"SweepInterval": c.SweepInterval, "GracePeriod": c.GracePeriod, "RetryInterval": c.RetryInterval, "Heartbeat": c.Heartbeat,
		"HandlerTimeout": c.HandlerTimeout}); err != nil {
		return err
	}
	if c.Heartbeat > MaxHeartbeat {
		return fmt.Errorf("%w: Heartbeat %v above MaxHeartbeat (%v)", ErrInvalidOption, c.Heartbeat, MaxHeartbeat)
	}
	return minDurations(map[string]time.Duration{"Lease": c.Lease, "BlockTimeout": c.BlockTimeout,
		"PromoteWait": c.PromoteWait, "SweepInterval": c.SweepInterval, "GracePeriod": c.GracePeriod,
		"RetryInterval": c.RetryInterval, "Heartbeat": c.Heartbeat, "HandlerTimeout": c.HandlerTimeout})
}

func (c ConsumerConfig) withDefaults(mode Mode) ConsumerConfig {
	orDefault(&c.Concurrency, DefaultConcurrency)
	orDefault(&c.Lease, DefaultLease)
	if c.BlockTimeout <= 0 {
		c.BlockTimeout = DefaultBlockTimeoutAtMostOnce
		if mode == AtLeastOnce {
			c.BlockTimeout = DefaultBlockTimeout
		}
	}
	orDefault(&c.PromoteWait, DefaultPromoteWait)
	orDefault(&c.SweepInterval, max(min(DefaultSweepInterval, c.Lease/2), MinDuration))
	orDefault(&c.GracePeriod, DefaultGracePeriod)
	orDefault(&c.RetryInterval, DefaultRetryInterval)
	orDefault(&c.Heartbeat, DefaultHeartbeat)
	return c
}

// Mode is a queue's delivery mode, fixed when the queue is created.
type Mode uint8

const (
	// AtLeastOnce (the default) leases every message it hands out; a message
	// whose consumer dies, or whose reply is lost, is delivered again when the
	// lease expires. Handlers Ack, Retry or Extend; after MaxAttempts a message
	// goes to the dead-letter list.
	AtLeastOnce Mode = iota
	// AtMostOnce hands whole messages out with one blocking pop and no lease:
	// what a crashed consumer held is lost. The cheapest mode, for
	// notifications and cache refreshes.
	AtMostOnce
)

func (m Mode) String() string {
	switch m {
	case AtLeastOnce:
		return "at-least-once"
	case AtMostOnce:
		return "at-most-once"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Config configures a queue. The zero value of every field selects its
// default; a duration above 0 and below MinDuration is refused.
type Config struct {
	// Layout is Levels(n) or Range(lo, hi, segments). Defaults to
	// Levels(DefaultLevels). Fixed at creation: opening an existing queue
	// with another layout fails with ErrConfigMismatch.
	Layout Layout

	// Mode is the delivery mode. Defaults to AtLeastOnce. Fixed at creation.
	Mode Mode

	// MaxPayload is the largest payload Enqueue accepts, in bytes. Defaults to
	// DefaultMaxPayload. Not stored: each producer enforces its own.
	MaxPayload int

	// MaxAttempts is how many deliveries an AtLeastOnce message gets before it
	// goes to the dead-letter list. Defaults to DefaultMaxAttempts.
	MaxAttempts int

	// Backoff gives the delay before the next attempt after a failed one.
	// Defaults to ExponentialBackoff(DefaultBackoffBase, DefaultBackoffMax).
	Backoff BackoffFunc

	// PromoteBatch is how many due delayed messages one promotion moves, at
	// most MaxBatch. Defaults to DefaultPromoteBatch.
	PromoteBatch int

	// EnqueueMiddleware wraps every Enqueue and EnqueueBatch, the first one
	// outermost (see EnqueueMiddleware). None by default.
	EnqueueMiddleware []EnqueueMiddleware

	// CallTimeout is the deadline of a Redis call whose context has none,
	// background calls included; at least MinDuration. Defaults to
	// DefaultCallTimeout.
	CallTimeout time.Duration

	// WaitReplicas, when above 0, makes every write that acknowledges
	// something (Enqueue, EnqueueBatch, Ack, AckBatch, Retry, dead-lettering)
	// wait until that many replicas have it (Redis WAIT, on the connection of
	// the write). A write that fewer replicas confirm within WaitTimeout is
	// still made, and returns ErrNotReplicated. Defaults to 0: no waiting.
	WaitReplicas int

	// WaitTimeout bounds each WAIT: at least MinDuration and, with
	// WaitReplicas, below CallTimeout (a write whose WAIT outlived its call
	// could not report ErrNotReplicated). Defaults to DefaultWaitTimeout.
	WaitTimeout time.Duration

	// Shards splits the queue over that many hash tags, each with every key
	// of a one-shard queue, so that Redis Cluster spreads them over its
	// primaries (1..MaxShards). Defaults to 1: a queue in one hash slot, byte
	// for byte as before shards existed. Fixed at creation, like Layout. A
	// queue of several shards needs Redis 7.0 and this version of prioq or
	// later in every process that opens it (its meta key says format 3).
	Shards int

	// AllowEviction lets Open accept a server whose maxmemory-policy is
	// allkeys-*, which may delete any of the queue's keys, messages included,
	// without an error. Open refuses such a server by default.
	AllowEviction bool

	// Logger receives what prioq has to say that is not an error of a call.
	// Defaults to slog.Default().
	Logger *slog.Logger

	// Retain, when set, keeps a record of each message this process acks
	// or dead-letters (its outcome, attempts, times, last error and result:
	// Queue.Result), at most Retain.Max of them per shard, none older than
	// Retain.For. The zero value keeps none, but the records of messages
	// given a result (Message.SetResult), under DefaultRetention. Not
	// stored: each process bounds what it writes (see docs/results.md).
	Retain Retention
}

// Retention bounds the finished messages a queue keeps (Config.Retain): at
// most Max records per shard, none older than For. A zero field takes
// DefaultRetention's when the other is set.
type Retention struct {
	Max int
	For time.Duration
}

// On reports whether r keeps anything.
func (r Retention) On() bool { return r.Max > 0 || r.For > 0 }

// MaxShards is the most shards a queue can have.
const MaxShards = 1024

// MaxBatch is the most messages one call moves: EnqueueBatch refuses more,
// ReceiveBatch, Peek and a promotion take at most this many. Redis runs a
// script alone, so a batch is a pause for every other client (about 10 ms for
// a take of MaxBatch on the reference machine).
const MaxBatch = 10000

// validateRaw refuses what a config says before its defaults are applied:
// a negative number or duration, which withDefaults would otherwise take
// for "unset" (Shards: -3 made a queue of one shard), so that a typo or a
// sign error is an error, never a silent default.
func (c Config) validateRaw() error {
	return negatives(map[string]int{"Shards": c.Shards, "MaxPayload": c.MaxPayload,
		"MaxAttempts": c.MaxAttempts, "PromoteBatch": c.PromoteBatch, "WaitReplicas": c.WaitReplicas,
		"Retain.Max": c.Retain.Max},
		map[string]time.Duration{"CallTimeout": c.CallTimeout, "WaitTimeout": c.WaitTimeout, "Retain.For": c.Retain.For})
}

// validate refuses a config (defaults applied) that cannot be used: a bad
// layout or mode, a PromoteBatch above MaxBatch, durations between 0 and
// MinDuration, a WaitTimeout the call would not outlive.
func (c Config) validate() error {
	if err := c.Layout.l.Validate(); err != nil {
		return err
	}
	if c.Mode != AtLeastOnce && c.Mode != AtMostOnce {
		return fmt.Errorf("%w: unknown mode %d", ErrInvalidOption, c.Mode)
	}
	if c.Shards > MaxShards {
		return fmt.Errorf("%w: %d shards (MaxShards is %d)", ErrInvalidOption, c.Shards, MaxShards)
	}
	if c.PromoteBatch > MaxBatch {
		return fmt.Errorf("%w: PromoteBatch %d is above MaxBatch (%d)", ErrInvalidOption, c.PromoteBatch, MaxBatch)
	}
	if err := minDurations(map[string]time.Duration{"CallTimeout": c.CallTimeout, "WaitTimeout": c.WaitTimeout, "Retain.For": c.Retain.For}); err != nil {
		return err
	}
	if c.WaitReplicas > 0 && c.WaitTimeout >= c.CallTimeout {
		return fmt.Errorf("%w: WaitTimeout %v is not below CallTimeout %v", ErrInvalidOption, c.WaitTimeout, c.CallTimeout)
	}
	return nil
}

// storeConfig is what the queue's shards need of c (defaults applied): one
// per queue, shared by its shards.
func (c Config) storeConfig() *store.Config {
	return &store.Config{Layout: c.Layout.l, Mode: store.Mode(c.Mode), MaxAttempts: c.MaxAttempts,
		PromoteBatch: c.PromoteBatch, CallTimeout: c.CallTimeout, WaitReplicas: c.WaitReplicas,
		WaitTimeout: c.WaitTimeout, Shards: c.Shards, AllowEviction: c.AllowEviction, Logger: c.Logger,
		Backoff: c.Backoff, Retain: store.Keep(c.Retain), Results: store.Keep(DefaultRetention)}
}

func (c Config) withDefaults() Config {
	c.Layout = c.Layout.withDefaults()
	orDefault(&c.Shards, 1)
	orDefault(&c.MaxPayload, DefaultMaxPayload)
	orDefault(&c.MaxAttempts, DefaultMaxAttempts)
	if c.Backoff == nil {
		c.Backoff = ExponentialBackoff(DefaultBackoffBase, DefaultBackoffMax)
	}
	orDefault(&c.PromoteBatch, DefaultPromoteBatch)
	orDefault(&c.CallTimeout, DefaultCallTimeout)
	orDefault(&c.WaitTimeout, DefaultWaitTimeout)
	if c.Retain.On() {
		orDefault(&c.Retain.Max, DefaultRetention.Max)
		orDefault(&c.Retain.For, DefaultRetention.For)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
