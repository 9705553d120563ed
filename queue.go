package prioq

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// storageFormat is written to the meta key; bump it when the stored form of
// keys or envelopes changes incompatibly. A queue of several shards says
// shardedFormat, which versions before shards refuse to open. A Range queue
// made since priorities have lists of their own (keys.go) says
// rangeListsFormat, sharded or not, which earlier versions refuse; one made
// before keeps its format and its segments of seq‖envelope (seqMembers).
// A queue of one shard and more than filledLanes lanes, Range or
// AtLeastOnce Levels, made since the filled index exists says filledFormat;
// one made before keeps its format and has none (Layout.unfilled).
const (
	storageFormat    = "2"
	shardedFormat    = "3"
	rangeListsFormat = "4"
	filledFormat     = "5"
)

// Queue is a handle on one named queue in Redis. It is safe for concurrent use
// and cheap to keep; it holds no connection of its own. Concurrent single
// Enqueue and Ack calls on one Queue share round trips (see the README), so
// share one Queue per queue name in a process.
type Queue struct {
	name   string
	cfg    Config
	shards []*shard // the queue's keys and the calls on them, cfg.Shards of them

	// next turns the shard of messages routed by neither ID nor OrderingKey
	// (producer.go).
	next *atomic.Uint32

	// clock is this host's clock (time.Now; tests set others). It stamps ids
	// and EnqueuedAt; no deadline depends on it (see now_ms in lua/lib.lua).
	clock func() time.Time
}

// newQueue is a handle on name with cfg (defaults applied), making no call.
func newQueue(c Client, name string, cfg Config) *Queue {
	q := &Queue{name: name, cfg: cfg, clock: time.Now, next: new(atomic.Uint32)}
	lanes := cfg.Layout.lanes()
	if cfg.Shards == 1 {
		q.shards = []*shard{newShard(c, name, &q.cfg, newKeySet(name, lanes))}
		return q
	}
	for i, tag := range shardTags(name, cfg.Shards) {
		q.shards = append(q.shards, newShard(c, name, &q.cfg, shardKeySet(name, i, tag, lanes)))
	}
	return q
}

// spreadRun is how many messages routed by neither ID nor OrderingKey go to
// one shard before the next shard's turn.
const spreadRun = 64

// hashShard is the shard of an id or ordering key: FNV-1a, modulo the shards.
func (q *Queue) hashShard(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(len(q.shards)))
}

// shardOf is the shard where a message with this id lives, or would: a
// generated id says it, a caller's id is hashed (OrderingKey aside: see
// shardsFor).
func (q *Queue) shardOf(id string) int {
	if len(q.shards) == 1 {
		return 0
	}
	if isGeneratedID(id) {
		if len(id) == generatedIDLen {
			return 0
		}
		if n, ok := generatedShard(id); ok && n < len(q.shards) {
			return n
		}
		return 0
	}
	return q.hashShard(id)
}

// shardsFor lists the shards to look in for a message with id, most likely
// first: its own shard and, for a caller's id of a queue of several shards
// (an OrderingKey may have put it elsewhere), every other.
func (q *Queue) shardsFor(id string) []*shard {
	home := q.shardOf(id)
	out := []*shard{q.shards[home]}
	if len(q.shards) > 1 && !isGeneratedID(id) {
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
func (q *Queue) eachShard(f func(i int, s *shard) error) error {
	if len(q.shards) == 1 {
		return f(0, q.shards[0])
	}
	errs := make([]error, len(q.shards))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, s := range q.shards {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(i, s)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

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
// Two round trips (a Range queue: one more, and one per shard more when its
// meta key is missing, to find segments stored by earlier versions). Cancelling
// ctx abandons the call; the queue is then either created whole or not at all.
func Open(ctx context.Context, c Client, name string, cfg Config) (*Queue, error) {
	cfg, err := checkOpen(c, name, cfg)
	if err != nil {
		return nil, err
	}
	q := newQueue(c, name, cfg)
	if err := q.eachShard(func(_ int, s *shard) error { return s.checkEviction(ctx) }); err != nil {
		return nil, err
	}
	if err := q.findSortedRange(ctx); err != nil {
		return nil, err
	}
	if err := q.shards[0].writeMeta(ctx, true); err != nil {
		return nil, err
	}
	return q, nil
}

// findSortedRange marks a Range queue as RangeSorted when its meta key is
// missing but its segments hold members of that form (not priorities' names):
// a restart without persistence can lose the meta key of a queue that
// earlier versions stored, and writing format 4 over its data would leave its
// messages passed by. One EXISTS, and when the meta key is missing one
// ZRANGE of the first few members per segment; nothing for other layouts.
//
// A member that names a priority (as the scripts write it, lib.lua
// index_prio) says format 4, whatever else is there: its lists exist, and
// its takes set aside, alone, what names no priority (an entry of the
// earlier form goes to the dead letters, from where RequeueDead puts it
// back). Without one, any member says RangeSorted (whose members are a
// sequence and an envelope). (On
// issue 29's base one member such as "x" at the head of a segment of format
// 4 was enough to serve the queue as RangeSorted: its names were taken as
// messages and buried, their lists left unread.)
func (q *Queue) findSortedRange(ctx context.Context) error {
	if !q.cfg.Layout.isRange() || q.cfg.Layout.seqMembers {
		return nil
	}
	var exists int
	if err := q.shards[0].do(ctx, radix.Cmd(&exists, "EXISTS", q.shards[0].k.meta)); err != nil {
		return fmt.Errorf("prioq: open %q: %w", q.name, err)
	}
	if exists == 1 {
		return nil // writeMeta reads its format
	}
	var named, sorted atomic.Bool
	err := q.eachShard(func(_ int, s *shard) error {
		heads := make([][]string, len(s.k.lanes))
		err := s.doPipeline(ctx, func() *radix.Pipeline {
			p := radix.NewPipeline()
			for i, l := range s.k.lanes {
				heads[i] = nil
				p.Append(radix.Cmd(&heads[i], "ZRANGE", l, "0", "7"))
			}
			return p
		})
		if err != nil && !isReply(err) { // (a lane of the wrong type: not this)
			return err
		}
		for _, h := range heads {
			for _, m := range h {
				if isIndexName(m) {
					named.Store(true)
				} else {
					sorted.Store(true)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prioq: open %q: %w", q.name, err)
	}
	if sorted.Load() && !named.Load() {
		q.cfg.Layout.seqMembers = true
	}
	return nil
}

// isIndexName reports whether m is a priority as a Range index of format 4
// names it: the decimal form strconv writes, within the layout's bounds
// (lib.lua index_prio reads the same).
func isIndexName(m string) bool {
	p, err := strconv.ParseInt(m, 10, 64)
	return err == nil && p <= MaxRangePriority && p >= -MaxRangePriority && strconv.FormatInt(p, 10) == m
}

// metaEvery is how many idle rounds of the sweeper (or of the promoter) go by
// between checks that the queue's meta key is still there.
const metaEvery = 6

// keepMeta puts the queue's meta key back if a restart without persistence
// lost it (open.lua writes it only when it is missing), so that Open keeps
// refusing a different configuration: every few rounds of the sweeper
// (AtLeastOnce) or of the promoter (AtMostOnce). A failure (a different
// configuration stored meanwhile, a full Redis) goes to report and is left to
// the next time.
func (s *shard) keepMeta(ctx context.Context, report func(error)) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	if err := s.writeMeta(cctx, false); err != nil && ctx.Err() == nil {
		report(err)
	}
}

// writeMeta creates the queue's meta record, or checks the one there: a
// queue stored with another layout, mode, shard count or format is
// ErrConfigMismatch. A queue of one shard has no shards field, as before
// shards existed; one of several is format 3, which earlier versions refuse.
// Opening (the first call, before the queue is used), a Range queue of the
// format before 4 is taken as it is: its layout is marked seqMembers; one
// stored before format 5 where it would now be (a filled index) is marked
// unfilled.
func (s *shard) writeMeta(ctx context.Context, opening bool) error {
	cfg := s.cfg
	format, shards, shardsArg := storageFormat, strconv.Itoa(cfg.Shards), ""
	if cfg.Shards > 1 {
		format, shardsArg = shardedFormat, shards
	}
	legacy := format
	if cfg.Layout.isRange() && !cfg.Layout.seqMembers {
		format = rangeListsFormat
	}
	unfilled := format // what the queue was before the filled index
	if s.filled() {
		format = filledFormat
	}
	var got []string
	err := s.do(ctx, openScript.Cmd(&got, []string{s.k.meta}, cfg.Layout.String(), cfg.Mode.String(), format, shardsArg))
	if noScripting(err) {
		return fmt.Errorf("%w: open %q: the server runs no Lua scripts (%w); prioq needs Redis >= 7.0 or Valkey >= 7.2 with scripting",
			ErrUnsupportedServer, s.name, err)
	}
	if err != nil {
		return fmt.Errorf("prioq: open %q: %w", s.name, err)
	}
	if len(got) != 4 {
		return fmt.Errorf("prioq: open %q: %w: meta reply %q", s.name, ErrScript, got)
	}
	if got[3] == "" {
		got[3] = "1"
	}
	// cfg is the queue's: every shard sees what is found here.
	if opening && got[2] != format && got[2] == unfilled && format == filledFormat {
		cfg.Layout.unfilled = true
		format = unfilled
	}
	if opening && got[2] != format && got[2] == legacy && cfg.Layout.isRange() {
		cfg.Layout.seqMembers, cfg.Layout.unfilled = true, false
		format = legacy
	}
	if got[0] != cfg.Layout.String() || got[1] != cfg.Mode.String() || got[2] != format || got[3] != shards {
		return fmt.Errorf("%w: %q is %s/%s/%s shards (format %s), opened as %s/%s/%s shards (format %s)", ErrConfigMismatch,
			s.name, got[0], got[1], got[3], got[2], cfg.Layout, cfg.Mode, shards, format)
	}
	return nil
}

// noScripting reports whether err is a server's refusal to run a script at
// all: EVAL or EVALSHA unknown (renamed away, or a server built without Lua)
// or scripting switched off. open.lua is the first script a queue runs, so
// Open says so instead of the first enqueue failing.
func noScripting(err error) bool {
	if !isReply(err) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown command") && strings.Contains(msg, "eval") ||
		strings.Contains(msg, "scripting") && (strings.Contains(msg, "disabled") || strings.Contains(msg, "not available"))
}

// onNodeOf issues a command that names no key on the node of key (a
// Cluster client routes by keys), on a shared connection. Not WithConn: it
// takes a connection out of the pool, and radix v4.1.4 wakes only one of the
// calls waiting for a shared connection per connection put back, so calls
// that came while every connection was out wait until their deadline (seen:
// concurrent Opens and Stats on a pool of 8, 8 of 50 Stats timed out).
func onNodeOf(key string) radix.CmdConfig {
	return radix.CmdConfig{ActionProperties: func(cmd string, args ...string) radix.ActionProperties {
		p := radix.DefaultActionProperties(cmd, args...)
		p.Keys = []string{key}
		return p
	}}
}

// checkEviction refuses a server whose maxmemory-policy may evict any key
// (allkeys-*): it would delete lanes, leases and delayed messages silently.
// volatile-* policies evict only keys with a TTL, and prioq sets none. It asks
// the server that holds the queue (on a cluster, the node of its hash slot).
// CONFIG may be renamed or denied; then it says so in a log line and goes on.
func (s *shard) checkEviction(ctx context.Context) error {
	var kv []string
	err := s.do(ctx, onNodeOf(s.k.slotKey()).Cmd(&kv, "CONFIG", "GET", "maxmemory-policy"))
	if err != nil || len(kv) != 2 {
		s.cfg.Logger.WarnContext(ctx, "prioq: could not read maxmemory-policy; an allkeys-* policy would evict queued messages silently",
			"queue", s.name, "error", err)
		return nil
	}
	if policy := kv[1]; strings.HasPrefix(policy, "allkeys-") && !s.cfg.AllowEviction {
		return fmt.Errorf("%w: %q is on a server with maxmemory-policy %s (set Config.AllowEviction to open it anyway)",
			ErrUnsafeEviction, s.name, policy)
	}
	return nil
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
	k := newKeySet(name, 1)
	var got []string
	if err := doBounded(ctx, c, checked.CallTimeout, radix.Cmd(&got, "HMGET", k.meta, "layout", "mode", "shards")); err != nil {
		return nil, fmt.Errorf("prioq: open %q: %w", name, err)
	}
	if len(got) != 3 || got[0] == "" {
		return nil, fmt.Errorf("prioq: open %q: %w: no such queue", name, ErrNotFound)
	}
	layout, err := ParseLayout(got[0])
	if err != nil {
		return nil, fmt.Errorf("prioq: open %q: stored %w", name, err)
	}
	switch got[1] {
	case AtLeastOnce.String():
		cfg.Mode = AtLeastOnce
	case AtMostOnce.String():
		cfg.Mode = AtMostOnce
	default:
		return nil, fmt.Errorf("prioq: open %q: %w: stored mode %q", name, ErrConfigMismatch, got[1])
	}
	cfg.Layout = layout
	cfg.Shards = 1
	if got[2] != "" {
		if cfg.Shards, err = strconv.Atoi(got[2]); err != nil || cfg.Shards < 1 {
			return nil, fmt.Errorf("prioq: open %q: %w: stored shards %q", name, ErrConfigMismatch, got[2])
		}
	}
	return Open(ctx, c, name, cfg)
}

// checkOpen is what Open and OpenExisting check before any call: the client,
// the name, and cfg, which it returns with its defaults.
func checkOpen(c Client, name string, cfg Config) (Config, error) {
	if c == nil {
		return cfg, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	if err := validateName(name); err != nil {
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
		out[i] = int(radix.ClusterSlot([]byte(s.k.slotKey())))
	}
	return out
}

// ShardNodes are the addresses of the primaries holding the queue's shards,
// shard 0 first, as its radix Cluster client last saw the cluster (""
// for each when the client is not a *radix.Cluster).
func (q *Queue) ShardNodes() []string {
	out := make([]string, len(q.shards))
	cl, ok := q.shards[0].c.(*radix.Cluster)
	if !ok {
		return out
	}
	topo := cl.Topo()
	for i, slot := range q.ShardSlots() {
		for _, node := range topo {
			if node.SecondaryOfAddr != "" {
				continue
			}
			for _, r := range node.Slots {
				if slot >= int(r[0]) && slot < int(r[1]) {
					out[i] = node.Addr
				}
			}
		}
	}
	return out
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// Mode is the queue's delivery mode.
func (q *Queue) Mode() Mode { return q.cfg.Mode }

// Layout is the queue's layout.
func (q *Queue) Layout() Layout {
	l := q.cfg.Layout
	l.unfilled = false // how it is stored, not what it is
	return l
}

// Stats is a snapshot of a queue, read in one round trip (not atomically:
// counts can be off by the messages that moved while it was read).
type Stats struct {
	// Lanes is the number of ready messages per lane, lane 0 (lowest priority) first.
	// With groups it counts a lane's entries: its messages without a group,
	// and one for each group with messages there (Groups has their counts).
	Lanes []int64
	// Ready is how many messages are ready: the sum of Lanes without groups.
	Ready int64
	// Groups is how many groups have messages ready (see Queue.Groups).
	Groups int64
	// Delayed is how many messages wait for their due time.
	Delayed int64
	// InFlight is how many messages are leased to consumers (AtLeastOnce).
	InFlight int64
	// Dead is the length of the dead-letter list (AtLeastOnce).
	Dead int64
	// OldestReady is the age of the oldest message at the head of a lane, 0 when
	// nothing is ready: the Redis server's clock minus the producer's
	// EnqueuedAt. Exact for Levels (a lane's head is its oldest message);
	// for Range it is the oldest among the highest-priority message of each
	// segment, a lower bound of the true oldest.
	OldestReady time.Duration
	// Paused reports whether consumers are paused.
	Paused bool

	// Enqueued and Acked are totals since the queue began: messages stored
	// by Enqueue and EnqueueBatch (a duplicate id not counted), and acks
	// (AtLeastOnce). Two snapshots give rates: (b.Acked - a.Acked) / time
	// between them. They are for rates, not accounts: a pipelined enqueue
	// refused at maxmemory, or an ack that lost its lease, may still count.
	Enqueued int64
	Acked    int64

	// Shards are the figures of each shard, shard 0 first, for a queue of
	// several shards (nil for one): the figures above are their sums (Paused:
	// any; OldestReady: the oldest).
	Shards []ShardStats
}

// ShardStats are the figures of one shard, and where it lives.
type ShardStats struct {
	Stats

	// Slot is the Redis Cluster hash slot of the shard's keys.
	Slot int

	// Node is the address of the primary serving the slot, as the queue's
	// radix Cluster client last saw the cluster ("" for another client).
	Node string
}

// Stats reads the queue's counters in one pipelined round trip (two for a
// Range queue of format 4: its depth is counted by a script). Cancelling ctx
// abandons the read.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	if len(q.shards) == 1 {
		return q.shards[0].stats(ctx)
	}
	per := make([]ShardStats, len(q.shards))
	slots, nodes := q.ShardSlots(), q.ShardNodes()
	err := q.eachShard(func(i int, s *shard) (err error) {
		per[i].Stats, err = s.stats(ctx)
		per[i].Slot, per[i].Node = slots[i], nodes[i]
		return err
	})
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Lanes: make([]int64, q.cfg.Layout.lanes()), Shards: per}
	for _, p := range per {
		for i, n := range p.Lanes {
			st.Lanes[i] += n
		}
		st.Ready += p.Ready
		st.Groups += p.Groups
		st.Delayed += p.Delayed
		st.InFlight += p.InFlight
		st.Dead += p.Dead
		st.Enqueued += p.Enqueued
		st.Acked += p.Acked
		st.OldestReady = max(st.OldestReady, p.OldestReady)
		st.Paused = st.Paused || p.Paused
	}
	return st, nil
}

// stats is Stats of one shard.
func (s *shard) stats(ctx context.Context) (Stats, error) {
	n := len(s.k.lanes)
	var st Stats
	var heads [][][]byte // first entry of each lane
	var paused int64
	var now []string    // the server's TIME: seconds, microseconds
	var counts []string // missing fields read as ""
	var groups map[string]string
	err := s.doPipeline(ctx, func() *radix.Pipeline {
		st, heads, paused, now, counts, groups = Stats{Lanes: make([]int64, n)}, make([][][]byte, n), 0, nil, nil, nil
		p := radix.NewPipeline()
		for i, key := range s.k.lanes {
			if s.lists() {
				break // depth.lua, below
			}
			if s.isRange() {
				p.Append(radix.Cmd(&st.Lanes[i], "ZCARD", key))
				p.Append(radix.Cmd(&heads[i], "ZRANGE", key, "0", "0"))
			} else {
				p.Append(radix.Cmd(&st.Lanes[i], "LLEN", key))
				p.Append(radix.Cmd(&heads[i], "LRANGE", key, "0", "0"))
			}
		}
		p.Append(radix.Cmd(&st.Delayed, "ZCARD", s.k.delayed))
		p.Append(radix.Cmd(&st.InFlight, "ZCARD", s.k.leases))
		p.Append(radix.Cmd(&st.Dead, "LLEN", s.k.dead))
		p.Append(radix.Cmd(&paused, "EXISTS", s.k.paused))
		p.Append(radix.Cmd(&now, "TIME"))
		p.Append(radix.Cmd(&counts, "HMGET", s.k.counts, countEnqueued, countAcked))
		p.Append(radix.Cmd(&groups, "HGETALL", s.k.gready))
		return p
	})
	if err != nil {
		return Stats{}, fmt.Errorf("prioq: stats %q: %w", s.name, err)
	}
	if s.lists() {
		if heads, err = s.listsDepth(ctx, st.Lanes); err != nil {
			return Stats{}, fmt.Errorf("prioq: stats %q: %w", s.name, err)
		}
	}
	st.Paused = paused == 1
	if len(counts) == 2 {
		st.Enqueued, _ = strconv.ParseInt(counts[0], 10, 64)
		st.Acked, _ = strconv.ParseInt(counts[1], 10, 64)
	}
	// Groups: their messages for their markers (gready's "" counts those).
	for g, v := range groups {
		c, _ := strconv.ParseInt(v, 10, 64)
		if g == "" {
			st.Ready -= c
		} else if c > 0 {
			st.Ready += c
			st.Groups++
		}
	}
	oldest := int64(-1)
	for i, c := range st.Lanes {
		st.Ready += c
		if len(heads[i]) == 0 {
			continue
		}
		if e, err := s.decodeLaneEntry(heads[i][0]); err == nil && (oldest < 0 || e.EnqueuedMs < oldest) {
			oldest = e.EnqueuedMs
		}
	}
	if now := serverMs(now); oldest >= 0 && now > oldest {
		st.OldestReady = time.Duration(now-oldest) * time.Millisecond
	}
	return st, nil
}

// statsNames is how many priorities' lists of a Range queue (format 4)
// Stats counts one by one, in all its segments: beyond, it estimates
// (depth.lua), so that a Stats costs Redis about a millisecond at most.
const statsNames = 1000

// listsDepth fills lanes with the messages waiting in each segment of a
// Range queue of format 4, and returns each one's first entry, as the
// pipeline of stats reads them for the other layouts.
func (s *shard) listsDepth(ctx context.Context, lanes []int64) ([][][]byte, error) {
	var rows [][][]byte
	if err := s.do(ctx, s.eval(depthScript, &rows, s.k.lanes, strconv.Itoa(statsNames))); err != nil {
		return nil, err
	}
	if len(rows) != len(lanes) {
		return nil, fmt.Errorf("%w: depth reply of %d rows for %d lanes", ErrScript, len(rows), len(lanes))
	}
	heads := make([][][]byte, len(lanes))
	for i, r := range rows {
		if len(r) < 2 {
			return nil, fmt.Errorf("%w: depth reply row %q", ErrScript, r)
		}
		lanes[i], _ = strconv.ParseInt(string(r[0]), 10, 64)
		if len(r[1]) > 0 {
			heads[i] = [][]byte{r[1]}
		}
	}
	return heads, nil
}

// serverMs reads a TIME reply as unix milliseconds (0 if malformed).
func serverMs(t []string) int64 {
	if len(t) != 2 {
		return 0
	}
	sec, err1 := strconv.ParseInt(t[0], 10, 64)
	us, err2 := strconv.ParseInt(t[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return sec*1000 + us/1000
}

// Len is the number of waiting messages: ready plus delayed, read as Stats
// reads them. Cancelling ctx abandons the read.
func (q *Queue) Len(ctx context.Context) (int64, error) {
	st, err := q.Stats(ctx)
	if err != nil {
		return 0, err
	}
	return st.Ready + st.Delayed, nil
}

// Peek describes up to n ready messages (at most MaxBatch) in the order
// consumers would get them, taking nothing. One round trip (per shard, the
// shards at once); cost O(lanes + n). Cancelling ctx abandons the read.
//
// A queue of several shards is shown in the order one consumer that starts
// now receives its messages with Receive: by priority; within a shard, in
// the order of its lanes (a requeued or retried message at the tail of its
// priority, whatever its enqueue time); between shards whose best messages
// have the same priority, in turn, as the consumer's fan-in breaks the tie
// (fanin.best: from shard 1, then the shard after the last one chosen).
// Other consumers, and one already running, may meet the shards' ties in
// another turn.
func (q *Queue) Peek(ctx context.Context, n int) ([]MessageInfo, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: Peek(%d)", ErrInvalidOption, n)
	}
	n = min(n, MaxBatch)
	if len(q.shards) == 1 {
		return q.shards[0].peek(ctx, n)
	}
	per := make([][]MessageInfo, len(q.shards))
	err := q.eachShard(func(i int, s *shard) (err error) {
		per[i], err = s.peek(ctx, n)
		return err
	})
	if err != nil {
		return nil, err
	}
	return fanInOrder(per, n), nil
}

// fanInOrder merges the shards' messages, each shard's in its own order, as
// a consumer's fan-in takes them one at a time: from the shard of the best
// priority, a tie broken by the same rule (fanin.best), the hint of a shard
// being the priority of its next message. Each shard gave up to n, so the
// first n merged are exact: a shard runs out only after giving n.
func fanInOrder(per [][]MessageInfo, n int) []MessageInfo {
	fi := newFanin(len(per))
	next := make([]int, len(per))
	hint := func(i int) int64 {
		if next[i] < len(per[i]) {
			return per[i][next[i]].Priority
		}
		return hintEmpty
	}
	for i := range per {
		fi.hint[i] = hint(i)
	}
	var out []MessageInfo
	for len(out) < n {
		i, _ := fi.best()
		if i < 0 {
			break
		}
		out = append(out, per[i][next[i]])
		next[i]++
		fi.hint[i] = hint(i)
	}
	return out
}

// peek is Peek of one shard.
func (s *shard) peek(ctx context.Context, n int) ([]MessageInfo, error) {
	var raw [][]byte
	if err := s.do(ctx, s.eval(peekScript, &raw, s.k.highFirst, strconv.Itoa(min(n, MaxBatch)), s.kind())); err != nil {
		return nil, fmt.Errorf("prioq: peek %q: %w", s.name, err)
	}
	out := make([]MessageInfo, 0, len(raw))
	for _, b := range raw {
		e, err := s.decodeLaneEntry(b)
		if err != nil {
			return out, fmt.Errorf("prioq: peek %q: %w", s.name, err)
		}
		out = append(out, newInfo(e))
	}
	return out, nil
}

// Cancel removes the waiting message with the given id, delayed or ready, and
// releases its id. It returns ErrNotFound when no waiting message has it (it
// was never enqueued, was already taken, or is in flight).
//
// Cost: one round trip. A delayed message is found in O(log n); a ready one by
// scanning the lanes inside Redis, O(ready messages) in the worst case, during
// which Redis serves nothing else (about 1 ms per 10,000 messages scanned on
// the reference machine). Cancelling ctx abandons the call; the message is then
// either removed or not.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	var err error
	for _, s := range q.shardsFor(id) {
		if err = s.cancel(ctx, id); !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return err
}

// cancel is Cancel on one shard.
func (s *shard) cancel(ctx context.Context, id string) error {
	var n int
	if err := s.do(ctx, s.eval(cancelScript, &n, s.k.cancelKeys, id, s.kind())); err != nil {
		return fmt.Errorf("prioq: cancel %q in %q: %w", id, s.name, err)
	}
	if n == 0 {
		return fmt.Errorf("prioq: cancel %q in %q: %w", id, s.name, ErrNotFound)
	}
	return nil
}

// Purge deletes every waiting message, ready and delayed, releases their
// caller ids, and returns how many it deleted. In-flight and dead messages
// stay, and keep their ids. One round trip, O(waiting messages) inside Redis
// when any caller id is alive (each one is read to release its id), during
// which Redis serves nothing else. Cancelling ctx abandons the call; the purge
// then happened whole or not at all.
func (q *Queue) Purge(ctx context.Context) (int64, error) {
	return q.sumShards(func(s *shard) (int64, error) { return s.purge(ctx) })
}

// sumShards runs f on every shard and adds up what it returns.
func (q *Queue) sumShards(f func(s *shard) (int64, error)) (int64, error) {
	var total atomic.Int64
	err := q.eachShard(func(_ int, s *shard) error {
		n, err := f(s)
		total.Add(n)
		return err
	})
	return total.Load(), err
}

// purge is Purge of one shard.
func (s *shard) purge(ctx context.Context) (int64, error) {
	var n int64
	if err := s.do(ctx, s.eval(purgeScript, &n, s.k.purgeKeys, s.kind(), s.armFlag())); err != nil {
		return 0, fmt.Errorf("prioq: purge %q: %w", s.name, err)
	}
	return n, nil
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
	return q.eachShard(func(_ int, s *shard) error { return s.pause(ctx) })
}

// pause is Pause of one shard.
func (s *shard) pause(ctx context.Context) error {
	if err := s.do(ctx, pauseScript.Cmd(nil, []string{s.k.paused}, s.kind())); err != nil {
		return fmt.Errorf("prioq: pause %q: %w", s.name, err)
	}
	return nil
}

// Resume undoes Pause and wakes an idle consumer. One round trip. It succeeds
// once the pause is lifted, even if the wake-up could not be set (at
// maxmemory): the lease sweep then wakes a consumer within SweepInterval.
// Cancelling ctx abandons the call; the queue is then resumed or not.
func (q *Queue) Resume(ctx context.Context) error {
	if q.cfg.Mode != AtLeastOnce {
		return fmt.Errorf("prioq: resume %q: %w", q.name, ErrWrongMode)
	}
	return q.eachShard(func(_ int, s *shard) error { return s.resume(ctx) })
}

// resume is Resume of one shard.
func (s *shard) resume(ctx context.Context) error {
	var deleted int64 // DEL's reply; -1 until it arrives
	err := s.doPipeline(ctx, func() *radix.Pipeline {
		deleted = -1
		p := radix.NewPipeline()
		p.Append(radix.Cmd(&deleted, "DEL", s.k.paused))
		p.Append(radix.Cmd(nil, "ZADD", s.k.wake, "LT", "-inf", wakeMember)) // what waits is not known
		p.Append(radix.Cmd(nil, "SPUBLISH", s.k.wake, announceResumed))      // for a MultiConsumer
		return p
	})
	if err != nil && !(isReply(err) && deleted >= 0) {
		return fmt.Errorf("prioq: resume %q: %w", s.name, err)
	}
	return nil
}
