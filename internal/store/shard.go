package store

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// Client is what a shard needs from a Redis client: radix's Pool and Conn
// (radix.Client) and its Cluster and Sentinel clients (radix.MultiClient) all
// satisfy it, and so does the root's prioq.Client (the same method).
type Client interface {
	Do(context.Context, radix.Action) error
}

var (
	_ Client = radix.Client(nil)
	_ Client = radix.MultiClient(nil)
)

// Mode is a queue's delivery mode (the root's prioq.Mode, same values).
type Mode uint8

const (
	// AtLeastOnce leases every message taken (take.lua), and a lease that
	// ends unacknowledged delivers it again.
	AtLeastOnce Mode = iota
	// AtMostOnce hands whole messages out, without a lease.
	AtMostOnce
)

// String is the mode as the meta key stores it.
func (m Mode) String() string {
	switch m {
	case AtLeastOnce:
		return "at-least-once"
	case AtMostOnce:
		return "at-most-once"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Config is what a shard needs of its queue's settings, defaults applied:
// the root converts its public Config into one per queue, in Open, and every
// shard of the queue shares it. Open may still mark its Layout (SeqMembers,
// Unfilled: what the meta key says the queue stores); after Open it is
// read-only.
type Config struct {
	Layout        Layout
	Mode          Mode
	MaxAttempts   int // deliveries before the dead letters (fail.lua, sweep.lua)
	PromoteBatch  int // messages one promotion moves at most
	CallTimeout   time.Duration
	WaitReplicas  int // with WaitTimeout: see write (call.go)
	WaitTimeout   time.Duration
	Shards        int  // of the queue
	AllowEviction bool // checkEviction accepts an allkeys-* policy
	Logger        *slog.Logger

	// Backoff is the queue's retry backoff: not used here, carried for the
	// root's Message.Retry, which reaches a queue's settings through the
	// shard its message came from.
	Backoff func(attempts int) time.Duration

	// Retain bounds the finished records (retain.go) every ack and
	// dead-lettering of this process writes; Max 0: none, but for messages
	// with a result, which are kept under Results.
	Retain, Results Keep
}

// A Shard is the part of a queue under one Redis Cluster hash tag: its keys
// (keys.go) and every Redis call made on them, in the files of their
// concepts (take.go, lease.go, send.go, sweep.go, promote.go, dead.go,
// ops.go, stats.go, meta.go; call.go for the calls themselves). Every script
// and pipeline prioq sends touches the keys of one shard, which is what
// makes it legal on a cluster. A queue of one shard has its name as its
// hash tag.
//
// A shard merges the concurrent single calls made on it (coalesce.go), and
// errors it returns name the queue.
type Shard struct {
	c    Client
	name string  // the queue's name, for errors and logs
	cfg  *Config // the queue's, defaults applied; read-only after Open
	k    KeySet

	// rideEvalsha: the take that carries acks (ride.go) goes as EVALSHA,
	// its node having refused FCALL once (a pipeline cannot ask first).
	rideEvalsha atomic.Bool

	// Merged calls: single enqueues (producer.go), acks of messages with
	// generated ids (a pipeline) and with caller ids (ack.lua) (lease.go),
	// takes (take.go).
	plain *coalescer[Item, plainResult]
	// grouped merges single enqueues of messages of a group (enqueue.lua).
	grouped *coalescer[Item, plainResult]
	acks    *coalescer[AckReq, error]
	idAcks  *coalescer[AckReq, error]
	takes   takeMergers

	brokenLogged atomic.Int64 // unix ns of the last log of broken lanes (take.go)

	// lastLane is 1 + the lane the last take in the fixed order found
	// work in (0: none yet), Range of format 4: the next take looks there
	// first (lua/inc/take_lists.lua pop_hinted).
	lastLane atomic.Int32

	// Plain enqueues announce work (producer.go) while heard (the last
	// announcement reached a subscriber), else once nextAsk (unix ns) passed.
	heard   atomic.Bool
	nextAsk atomic.Int64
	// pubRefused: the server refused an announcement (NOPERM), said once
	// in the log (producer.go).
	pubRefused atomic.Bool

	// blockUse counts the blocking commands waiting on its node's pool
	// (the root's pool.go), set by the first consumer (CountBlocking).
	blockUse atomic.Pointer[atomic.Int64]
}

func newShard(c Client, name string, cfg *Config, k KeySet) *Shard {
	s := &Shard{c: c, name: name, cfg: cfg, k: k}
	s.plain = &coalescer[Item, plainResult]{size: func(p Item) int { return len(p.Env) },
		maxItems: maxMergedEnqueues, maxBytes: maxMergedEnqueueBytes, timeout: cfg.CallTimeout}
	s.grouped = &coalescer[Item, plainResult]{size: func(p Item) int { return len(p.Env) },
		maxItems: maxMergedEnqueues, maxBytes: maxMergedEnqueueBytes, timeout: cfg.CallTimeout}
	s.acks = &coalescer[AckReq, error]{size: func(AckReq) int { return 1 },
		maxItems: maxMergedAcks, maxBytes: maxMergedAcks, timeout: cfg.CallTimeout}
	s.idAcks = &coalescer[AckReq, error]{size: func(AckReq) int { return 1 },
		maxItems: maxMergedAcks, maxBytes: maxMergedAcks, timeout: cfg.CallTimeout}
	s.takes.byLease = make(map[time.Duration]*coalescer[takeAsk, takeResult])
	return s
}

// eval is the call of fenced script sc with keys and args: keys and the
// shard's fence (see script), in the shard's slot.
func (s *Shard) eval(sc script, rcv any, keys []string, args ...string) radix.Action {
	return &fcall{sc: sc, rcv: rcv, keys: append(clip(keys), s.k.fence), args: args}
}

func (s *Shard) kind() string {
	switch {
	case s.filled() && s.lists():
		return argKindListsFilled
	case s.filled():
		return argKindFilled
	case s.lists():
		return argKindLists
	case s.isRange():
		return argKindRange
	}
	return argKindLevels
}

func (s *Shard) isRange() bool { return s.cfg.Layout.kind == kindRange }

// filled reports whether the queue's lanes are named in its filled index
// (keys.go, format 5): more than filledLanes lanes, one shard (a shard's
// takes pop over its lanes under the best priority of the others), not
// stored before (Layout.unfilled), and Range of format 4 or AtLeastOnce
// Levels: their consumers take with take.lua (AtMostOnce Levels consumers
// block on the lanes themselves).
func (s *Shard) filled() bool {
	l := s.cfg.Layout
	if l.unfilled || s.cfg.Shards > 1 || l.lanes() <= filledLanes {
		return false
	}
	return s.lists() || (l.kind == kindLevels && s.cfg.Mode == AtLeastOnce)
}

// lists reports whether the queue is a Range queue of format 4: a list per
// priority, named by its segment's index (keys.go).
func (s *Shard) lists() bool { return s.isRange() && !s.cfg.Layout.seqMembers }

// wakes reports whether writes that make work ready arm the wake-up set: for
// AtLeastOnce consumers, and for every consumer of a queue of several shards
// (they wait on each shard's wake-up set instead of popping its lanes).
//
// A Range queue of format 4 always: no blocking pop can take a priority's
// name and its list's head together, so its AtMostOnce consumers wait on the
// wake-up set and take with take.lua, without a lease.
func (s *Shard) wakes() bool { return s.cfg.Mode == AtLeastOnce || s.cfg.Shards > 1 || s.lists() }

// armFlag is the scripts' arm flag: argNo (AtMostOnce, one shard: consumers
// block on the lanes), argYes (arm the wake-up set), argSharded (that, and
// the sched key is a sorted set: a shard of a queue of several).
func (s *Shard) armFlag() string {
	switch {
	case s.cfg.Shards > 1:
		return argSharded
	case s.wakes():
		return argYes
	}
	return argNo
}

// sharded reports whether s is a shard of a queue of several.
func (s *Shard) sharded() bool { return s.cfg.Shards > 1 }

// decodeLaneEntry decodes what a lane holds: the envelope itself in a level
// list, seq‖envelope in a segment.
func (s *Shard) decodeLaneEntry(b []byte) (Envelope, error) {
	if s.isRange() && !s.lists() {
		var err error
		if b, err = segmentEnvelope(b); err != nil {
			return Envelope{}, err
		}
	}
	return DecodeEnvelope(b)
}
