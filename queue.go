package prioq

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prioq/prioq/internal/consume"
	"github.com/prioq/prioq/internal/store"
)

// Queue is a handle on one named queue in Redis. It is safe for concurrent use
// and cheap to keep; it holds no connection of its own. Concurrent single
// Enqueue and Ack calls on one Queue share round trips (see the README), so
// share one Queue per queue name in a process.
type Queue struct {
	name string
	cfg  Config
	// sc is what the shards know of cfg, shared by them: Open marks its
	// layout with what the meta key says is stored (see Layout).
	sc     *store.Config
	shards []*store.Shard // the queue's keys and the calls on them, cfg.Shards of them

	// next turns the shard of messages routed by neither ID nor OrderingKey
	// (producer.go).
	next *atomic.Uint32

	// clock is this host's clock (time.Now; tests set others). It stamps ids
	// and EnqueuedAt; no deadline depends on it (see now_ms in the scripts'
	// lua/inc/util.lua).
	clock func() time.Time
}

// newQueue is a handle on name with cfg (defaults applied), making no call.
func newQueue(c Client, name string, cfg Config) *Queue {
	q := &Queue{name: name, cfg: cfg, sc: cfg.storeConfig(), clock: time.Now, next: new(atomic.Uint32)}
	q.shards = store.NewShards(c, name, q.sc)
	return q
}

// layout is the queue's layout as its shards serve it (Open marks how it
// found it stored).
func (q *Queue) layout() store.Layout { return q.sc.Layout }

// spreadRun is how many messages routed by neither ID nor OrderingKey go to
// one shard before the next shard's turn.
const spreadRun = 64

// hashShard is the shard of an id or ordering key: FNV-1a, modulo the shards.
func (q *Queue) hashShard(key string) int { return store.HashShard(key, len(q.shards)) }

// shardOf is the shard where a message with this id lives, or would: a
// generated id says it, a caller's id is hashed (OrderingKey aside: see
// shardsFor).
func (q *Queue) shardOf(id string) int {
	if len(q.shards) == 1 {
		return 0
	}
	if n, generated := store.ShardOfID(id, len(q.shards)); generated {
		return n
	}
	return q.hashShard(id)
}

// shardsFor lists the shards to look in for a message with id, most likely
// first: its own shard and, for a caller's id of a queue of several shards
// (an OrderingKey may have put it elsewhere), every other.
func (q *Queue) shardsFor(id string) []*store.Shard {
	home := q.shardOf(id)
	out := []*store.Shard{q.shards[home]}
	if len(q.shards) > 1 && !store.IsGeneratedID(id) {
		for i, s := range q.shards {
			if i != home {
				out = append(out, s)
			}
		}
	}
	return out
}

// eachShard runs f on every shard, at most 16 at once, and joins their
// errors.
func (q *Queue) eachShard(f func(i int, s *store.Shard) error) error { return store.Each(q.shards, f) }

func (q *Queue) now() time.Time { return q.clock() }

// withClock is a test hook: the same queue seen from a host whose clock is now.
func (q *Queue) withClock(now func() time.Time) *Queue {
	c := *q
	c.clock = now
	return &c
}

// Open creates the queue `name` with cfg, or opens it if it exists. Opening an
// existing queue whose stored layout or mode differs from cfg fails with
// ErrConfigMismatch and changes nothing. A server whose maxmemory-policy is
// allkeys-* is refused with ErrUnsafeEviction unless cfg.AllowEviction is set.
// Three round trips (a Range queue: one more, and one per shard more when its
// meta key is missing, to find segments stored by earlier versions). Cancelling
// ctx abandons the call; the queue is then either created whole or not at all.
func Open(ctx context.Context, c Client, name string, cfg Config) (*Queue, error) {
	cfg, err := checkOpen(c, name, cfg)
	if err != nil {
		return nil, err
	}
	q := newQueue(c, name, cfg)
	if err := q.eachShard(func(_ int, s *store.Shard) error { return s.CheckEviction(ctx) }); err != nil {
		return nil, err
	}
	if err := store.FindSortedRange(ctx, q.shards); err != nil {
		return nil, err
	}
	if err := q.shards[0].WriteMeta(ctx, true); err != nil {
		return nil, err
	}
	// The scripts' Functions library (internal/store/funcs.go) on each
	// shard's node, so the first calls find it. Best effort: a call on a
	// node that lacks it loads it, or goes as EVALSHA.
	q.eachShard(func(_ int, s *store.Shard) error {
		s.LoadLibrary(ctx)
		return nil
	})
	return q, nil
}

// OpenExisting opens a queue that exists in Redis with the layout and mode
// stored in its meta key, for tools that operate queues they did not create
// (the prioq command, dashboards): cfg's other fields apply as for Open, its
// Layout and Mode are ignored. ErrNotFound when the queue has no meta key.
// Cancelling ctx abandons the call.
func OpenExisting(ctx context.Context, c Client, name string, cfg Config) (*Queue, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	checked, err := checkOpen(c, name, cfg)
	if err != nil {
		return nil, err
	}
	m, err := store.ReadMeta(ctx, c, name, checked.CallTimeout)
	if err != nil {
		return nil, err
	}
	cfg.Layout, cfg.Mode, cfg.Shards = Layout{m.Layout}, Mode(m.Mode), m.Shards
	return Open(ctx, c, name, cfg)
}

// checkOpen is what Open and OpenExisting check before any call: the client,
// the name, and cfg, which it returns with its defaults.
func checkOpen(c Client, name string, cfg Config) (Config, error) {
	if c == nil {
		return cfg, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	if err := store.ValidateName(name); err != nil {
		return cfg, err
	}
	if err := cfg.validateRaw(); err != nil {
		return cfg, err
	}
	cfg = cfg.withDefaults()
	return cfg, cfg.validate()
}

// Shards is how many shards the queue has (Config.Shards).
func (q *Queue) Shards() int { return len(q.shards) }

// ShardSlots are the Redis Cluster hash slots of the queue's shards, shard 0
// first: every key of a shard is in its slot, so the node serving a slot
// (CLUSTER SLOTS) holds that shard, and moving the slot moves it whole.
func (q *Queue) ShardSlots() []int {
	out := make([]int, len(q.shards))
	for i, s := range q.shards {
		out[i] = s.Slot()
	}
	return out
}

// ShardNodes are the addresses of the primaries holding the queue's shards,
// shard 0 first, as its radix Cluster client last saw the cluster (""
// for each when the client is not a *radix.Cluster).
func (q *Queue) ShardNodes() []string { return store.Nodes(q.shards[0].Client(), q.ShardSlots()) }

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// Mode is the queue's delivery mode.
func (q *Queue) Mode() Mode { return q.cfg.Mode }

// Layout is the queue's layout.
func (q *Queue) Layout() Layout { return Layout{q.layout().Stored()} }

// Peek describes up to n ready messages (at most MaxBatch) in the order
// consumers would get them, taking nothing. One round trip (per shard, the
// shards at once); cost O(lanes + n). Cancelling ctx abandons the read.
//
// A queue of several shards is shown in the order one consumer that starts
// now receives its messages with Receive: by priority; within a shard, in
// the order of its lanes (a requeued or retried message at the tail of its
// priority, whatever its enqueue time); between shards whose best messages
// have the same priority, in turn, as the consumer's fan-in breaks the tie
// (internal/consume hints.go best: from shard 1, then the shard after the last one chosen).
// Other consumers, and one already running, may meet the shards' ties in
// another turn.
func (q *Queue) Peek(ctx context.Context, n int) ([]MessageInfo, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: Peek(%d)", ErrInvalidOption, n)
	}
	n = min(n, MaxBatch)
	per := make([][]MessageInfo, len(q.shards))
	err := q.eachShard(func(i int, s *store.Shard) error {
		infos, err := s.Peek(ctx, n)
		per[i] = infosOf(infos)
		return err
	})
	if len(q.shards) == 1 {
		return per[0], err
	}
	if err != nil {
		return nil, err
	}
	return fanInOrder(per, n), nil
}

// infosOf is the MessageInfo of each Info (nil for nil).
func infosOf(infos []store.Info) []MessageInfo {
	if infos == nil {
		return nil
	}
	out := make([]MessageInfo, len(infos))
	for i, info := range infos {
		out[i] = MessageInfo(info)
	}
	return out
}

// fanInOrder merges the shards' messages, each shard's in its own order, as
// a consumer's fan-in takes them one at a time: from the shard of the best
// priority, a tie broken by the same rule (internal/consume FanInOrder), the hint of a shard
// being the priority of its next message. Each shard gave up to n, so the
// first n merged are exact: a shard runs out only after giving n.
func fanInOrder(per [][]MessageInfo, n int) []MessageInfo {
	prios := make([][]int64, len(per))
	for i, infos := range per {
		for _, m := range infos {
			prios[i] = append(prios[i], m.Priority)
		}
	}
	next := make([]int, len(per))
	var out []MessageInfo
	for _, i := range consume.FanInOrder(prios, n) {
		out = append(out, per[i][next[i]])
		next[i]++
	}
	return out
}

// Cancel removes the message with the given id, waiting (delayed or ready)
// or in flight, and releases its id. It returns ErrNotFound when no waiting
// or in-flight message has it (it was never enqueued, or is finished or
// dead).
//
// A message in flight (AtLeastOnce) is cancelled on the server at once: its
// lease and in-flight record go, it is never delivered again, its group's
// concurrency slot comes back, and it is counted as cancelled (Stats). The
// handler that runs it, in any process, learns it at its Run's next lease
// renewal, within Lease/3 (ConsumerConfig.Lease of that consumer; a
// MultiConsumer hears the cancel announced and renews at once): its
// context is cancelled with cause ErrCancelled, and AfterFinish gets
// OutcomeCancelled. A consumer with NoRenew, or a handler outside Run,
// is not told: its Ack, Retry or Extend fails with ErrLeaseLost.
//
// Cost: one round trip for a waiting message. A delayed message is found in
// O(log n); a ready one by scanning the lanes inside Redis, O(ready
// messages) in the worst case, during which Redis serves nothing else
// (about 1 ms per 10,000 messages scanned on the reference machine). A
// message in flight is found as Message finds it (O(messages in flight),
// a bounded piece a call) and then ended in one more round trip. Cancelling
// ctx abandons the call; the message is then either removed or not.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	if err := store.ValidateID(id); err != nil {
		return err
	}
	// A message may move between the waiting search and the in-flight one
	// (taken, or its lease ended back into its lane): a few rounds.
	var err error
	for range 3 {
		if err = q.cancelWaiting(ctx, id); !errors.Is(err, ErrNotFound) {
			return err
		}
		st, ferr := q.Message(ctx, id)
		switch {
		case errors.Is(ferr, ErrNotFound):
			return err
		case ferr != nil:
			return ferr
		case st.State == MessageReady || st.State == MessageDelayed:
			continue // it came back meanwhile
		case st.State != MessageInFlight:
			return err
		}
		ok, cerr := q.shards[st.Shard].CancelLease(ctx, st.LeaseToken, id, st.Group)
		if ok || cerr != nil {
			return cerr
		}
		// The lease ended meanwhile: acked, retried or expired; look again.
	}
	return err
}

// cancelWaiting removes the waiting message id, on each shard that may hold it.
func (q *Queue) cancelWaiting(ctx context.Context, id string) error {
	var err error
	for _, s := range q.shardsFor(id) {
		if err = s.Cancel(ctx, id); !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return err
}

// Purge deletes every waiting message, ready and delayed, releases their
// caller ids, and returns how many it deleted. In-flight and dead messages
// stay, and keep their ids. One round trip, O(waiting messages) inside Redis
// when any caller id is alive (each one is read to release its id), during
// which Redis serves nothing else. Cancelling ctx abandons the call; the purge
// then happened whole or not at all.
func (q *Queue) Purge(ctx context.Context) (int64, error) {
	return q.sumShards(func(s *store.Shard) (int64, error) { return s.Purge(ctx) })
}

// sumShards runs f on every shard and adds up what it returns.
func (q *Queue) sumShards(f func(s *store.Shard) (int64, error)) (int64, error) {
	var total atomic.Int64
	err := q.eachShard(func(_ int, s *store.Shard) error {
		n, err := f(s)
		total.Add(n)
		return err
	})
	return total.Load(), err
}

// Pause stops consumers from taking messages (AtLeastOnce): a take that starts
// after Pause returns takes nothing. Producers keep enqueueing, delayed
// messages keep being promoted, and messages already in flight finish. One
// round trip. AtMostOnce queues return ErrWrongMode: their consumers pop lanes
// directly with a blocking command that cannot consult a flag. Cancelling ctx
// abandons the call; the queue is then paused or not.
func (q *Queue) Pause(ctx context.Context) error {
	if q.cfg.Mode != AtLeastOnce {
		return fmt.Errorf("prioq: pause %q: %w", q.name, ErrWrongMode)
	}
	return q.eachShard(func(_ int, s *store.Shard) error { return s.Pause(ctx) })
}

// Resume undoes Pause and wakes an idle consumer. One round trip. It succeeds
// once the pause is lifted, even if the wake-up could not be set (at
// maxmemory): the lease sweep then wakes a consumer within SweepInterval.
// Cancelling ctx abandons the call; the queue is then resumed or not.
func (q *Queue) Resume(ctx context.Context) error {
	if q.cfg.Mode != AtLeastOnce {
		return fmt.Errorf("prioq: resume %q: %w", q.name, ErrWrongMode)
	}
	return q.eachShard(func(_ int, s *store.Shard) error { return s.Resume(ctx) })
}
