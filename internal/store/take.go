package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// leaseSuffix is 20 random hex digits: RandomID's, and the random part of a
// take's token suffix before holders were named (takeSuffix now: take.lua
// puts the take's server time and each message's place in the take in front
// of it). With it tokens are never reused, even across a step back of the
// server's clock, so an ack from an old delivery cannot match a new one.
func leaseSuffix() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// holderID names this process in the lease tokens of its takes: a take's
// suffix is holderID, "-" and 16 random hex digits (takeSuffix), so a
// reader of the leases learns which process holds each (LeaseHolder) and
// finds it in the worker registry (WorkerRecord.Holder) at no cost to the
// take. Random per process: takes merged across a process's consumers
// (TakeShared) share one call, so a process, not a consumer, is what a
// token can name.
var holderID = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// HolderID returns this process's holder id (see holderID).
func HolderID() string { return holderID }

func takeSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return holderID + "-" + hex.EncodeToString(b[:])
}

// LeaseHolder returns the holder id a lease token names: "" for a token of
// a take before holders were named (its suffix is random alone) or one that
// does not parse.
func LeaseHolder(token string) string {
	const head, id = 13 + 4, 12 // time, place; holderID's length
	if len(token) <= head+id || token[head+id] != '-' {
		return ""
	}
	h := token[head : head+id]
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ""
		}
	}
	return h
}

// take leases up to n ready messages from the lanes in the given order.
// It returns paused=true when the queue is paused. One round trip.
//
// The lease ends lease after the server's now when the script runs. The
// deadline the message carries is lease after this host's monotonic clock
// before the call: no later than the server's, whatever the host's wall
// clock says, so a handler's context never outlives its lease.
func (s *Shard) take(ctx context.Context, lanes []string, n int, lease time.Duration) (msgs []*Delivery, paused bool, err error) {
	r, err := s.takeFrom(ctx, takeArgs{lanes: lanes, n: n, lease: lease})
	return r.msgs, r.paused, err
}

// takeArgs are a take's: the lanes in serving order, of which it pops from
// the first popLanes only (0: all) but looks at all for the best priority
// left when top asks it; lease 0 takes without a lease (AtMostOnce).
type takeArgs struct {
	lanes     []string
	n         int
	lease     time.Duration
	popLanes  int
	top       bool
	floor     string // the lowest priority to take ('' for any): see take.lua
	claimWake bool   // remove the wake-up member first (a MultiConsumer: see take.lua)
	guess     bool   // lanes are highFirst, all of them: try where the last such take found work (take.lua checks popLanes and floor), or read the filled index
}

// takeReply is what a take got, with the best priority left in the shard's
// lanes (hasTop false: none, or not asked).
type takeReply struct {
	msgs    []*Delivery
	paused  bool
	top     int64
	hasTop  bool
	dropped []error // AtMostOnce: entries that did not decode, gone
	// limited: the queue is at its rate limit (limits.go), and its next
	// message may be taken after this long (nothing was taken).
	limited time.Duration
}

// takeCall is one call of take.lua: its keys and arguments, and what reading
// its reply needs.
type takeCall struct {
	a          takeArgs
	keys, args []string
	guessed    bool      // a lists take that guessed its lane: remember where it found work
	start      time.Time // before the call: the deliveries' deadlines count from it
}

// takeFrom runs take.lua with a; see take.
func (s *Shard) takeFrom(ctx context.Context, a takeArgs) (takeReply, error) {
	tc := s.takeCallOf(a)
	var raw [][]byte
	if err := s.do(ctx, s.eval(takeScript, &raw, tc.keys, tc.args...)); err != nil {
		return takeReply{}, fmt.Errorf("prioq: take from %q: %w", s.name, err)
	}
	return s.takeReplyOf(ctx, tc, raw)
}

// takeCallOf is the call of take.lua for a.
func (s *Shard) takeCallOf(a takeArgs) takeCall {
	// The filled index serves a take over every lane, highest first, with
	// no floor, no lane limit and no top asked: KEYS[5] is then the index.
	viaFilled := a.guess && s.filled() && a.popLanes == 0 && a.floor == "" && !a.top
	var keys []string
	if viaFilled {
		keys = []string{s.k.paused, s.k.leases, s.k.inflight, s.k.wake, s.k.filled}
	} else {
		keys = append([]string{s.k.paused, s.k.leases, s.k.inflight, s.k.wake}, a.lanes...)
	}
	start := time.Now()
	// take.lua's ARGV, in its order: lease, count, kind, token suffix,
	// modes, lanes to pop from, floor, hint, lane count (MODE_FILLED).
	var modes []string
	if a.top {
		modes = append(modes, modeTop)
	}
	if a.claimWake {
		modes = append(modes, modeClaim)
	}
	if s.cfg.Shards > 1 {
		modes = append(modes, modeSharded)
	}
	hint, nlanes := "", ""
	if l := s.lastLane.Load(); a.guess && s.lists() && !viaFilled && l > 0 {
		// Where the last take found work, as a place in highFirst.
		hint = strconv.Itoa(len(a.lanes) - int(l) + 1)
	}
	if viaFilled {
		modes = append(modes, modeFilled)
		nlanes = strconv.Itoa(len(s.k.lanes))
	}
	guessed := a.guess && s.lists() && !viaFilled
	args := []string{"0", strconv.Itoa(a.n), s.kind(), takeSuffix(), strings.Join(modes, " "),
		strconv.Itoa(a.popLanes), a.floor, hint, nlanes}
	if a.lease > 0 {
		args[0] = fmtInt(leaseMs(a.lease))
	}

	return takeCall{a: a, keys: keys, args: args, guessed: guessed, start: start}
}

// takeReplyOf reads the reply of tc (take.lua's): status, the wait or the
// best priority left, the keys passed by, then the pairs.
func (s *Shard) takeReplyOf(ctx context.Context, tc takeCall, raw [][]byte) (r takeReply, err error) {
	a := tc.a
	if len(raw) < 3 {
		return r, fmt.Errorf("prioq: take from %q: %w: %d reply items", s.name, ErrScript, len(raw))
	}
	status, second := string(raw[0]), string(raw[1])
	if len(raw[2]) > 0 {
		s.logBrokenLanes(ctx, string(raw[2]))
	}
	raw = raw[3:]
	switch status {
	case replyPaused:
		return takeReply{paused: true}, nil
	case replyLimited:
		ms, err := strconv.ParseInt(second, 10, 64)
		if err != nil || ms <= 0 {
			return r, fmt.Errorf("prioq: take from %q: %w: rate limit wait %q", s.name, ErrScript, second)
		}
		return takeReply{limited: time.Duration(ms) * time.Millisecond}, nil
	case "":
	default:
		return r, fmt.Errorf("prioq: take from %q: %w: status %q", s.name, ErrScript, status)
	}
	if a.top && second != "" {
		if r.top, err = strconv.ParseInt(second, 10, 64); err != nil {
			return r, fmt.Errorf("prioq: take from %q: %w: top %q", s.name, ErrScript, second)
		}
		r.hasTop = true
	}
	if len(raw)%2 != 0 {
		return r, fmt.Errorf("prioq: take from %q: %w: %d reply items", s.name, ErrScript, len(raw))
	}
	deadline := tc.start.Add(a.lease)
	for i := 0; i < len(raw); i += 2 {
		first, member := string(raw[i]), raw[i+1]
		e, derr := s.decodeLaneEntry(member)
		if a.lease == 0 {
			// AtMostOnce: first is the lane. A message that does not decode
			// has nowhere to go (no dead letters).
			lane, lerr := strconv.Atoi(first)
			if derr == nil && lerr != nil {
				derr = lerr
			}
			if derr != nil {
				r.dropped = append(r.dropped, fmt.Errorf("prioq: receive from %q: dropped entry of lane %s: %w", s.name, first, derr))
				continue
			}
			m := newDelivery(e, s)
			m.Attempts = 0
			m.raw, m.lane = member, lane
			r.msgs = append(r.msgs, m)
			continue
		}
		if derr != nil {
			// Corrupt entries were leased like any other, so this is safe to
			// report and move aside without losing anything else.
			s.bury(ctx, first, derr)
			continue
		}
		m := newDelivery(e, s)
		m.Attempts++ // the stored count is of the deliveries before this one
		m.token, m.raw = first, member
		m.deadline.Store(&deadline)
		r.msgs = append(r.msgs, m)
	}
	var late []error
	r.msgs, late = s.lateOnes(ctx, r.msgs)
	r.dropped = append(r.dropped, late...)
	if n := len(r.msgs); tc.guessed && n > 0 {
		if l, err := s.cfg.Layout.laneOf(r.msgs[n-1].Priority); err == nil {
			s.lastLane.Store(int32(l) + 1)
		}
	}
	return r, nil
}

// brokenLogEvery is how often at most a queue logs the lane keys of the wrong
// type its takes pass by (each take while they are broken would say it).
const brokenLogEvery = time.Minute

// logBrokenLanes says, at most once per brokenLogEvery, that takes pass by
// lane keys of the wrong type (their messages wait until the keys are
// mended), or met entries of a Range segment's index that name no priority
// (each moved to the dead letters alone: lua/inc/take_aside.lua set_aside).
func (s *Shard) logBrokenLanes(ctx context.Context, keys string) {
	now := time.Now().UnixNano()
	last := s.brokenLogged.Load()
	if now-last < int64(brokenLogEvery) || !s.brokenLogged.CompareAndSwap(last, now) {
		return
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "prioq: lane keys of the wrong type (or content): takes pass them by until they are mended, "+
		"and move index entries that name no priority to the dead letters",
		slog.String("queue", s.name), slog.String("keys", keys))
}

// takeMerged is take over the queue's fixed lane order, merged with the
// takes of the queue's other consumers (same lease) in flight at the same
// time: one script call pops for all of them, each gets its own messages
// (the first asker the first ones, so the priority order holds across them).
// A take still queued when ctx ends (the consumer closing), or CallTimeout
// after it queued, is dropped and returns an error; one sent is waited for
// whatever ctx does, because its leased messages must reach their asker
// (each merged call has CallTimeout).
//
// acks ride on the take (takeRiding): their errors come back in the
// result's ackErrs, one per ack. A take dropped before it was sent sends
// its acks alone, so that no ack is lost with it.
func (s *Shard) takeMerged(ctx context.Context, n int, lease time.Duration, acks []AckReq) takeResult {
	s.takes.mu.Lock()
	c := s.takes.byLease[lease]
	if c == nil {
		c = &coalescer[takeAsk, takeResult]{size: func(a takeAsk) int { return a.n }, maxItems: MaxBatch, maxBytes: MaxBatch,
			timeout: s.cfg.CallTimeout, keepSent: true}
		s.takes.byLease[lease] = c
	}
	s.takes.mu.Unlock()
	run := func(ctx context.Context, asks []takeAsk) []takeResult { return s.takeFor(ctx, asks, lease) }
	r := c.do(ctx, takeAsk{n: n, acks: acks}, run, func(err error) takeResult {
		return takeResult{err: fmt.Errorf("prioq: take from %q: %w", s.name, err)}
	})
	if len(acks) > 0 && r.ackErrs == nil { // not sent
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CallTimeout)
		r.ackErrs = s.ack(actx, acks)
		cancel()
	}
	return r
}

// takeMergers holds a queue's take coalescers, one per lease duration.
type takeMergers struct {
	mu      sync.Mutex
	byLease map[time.Duration]*coalescer[takeAsk, takeResult]
}

// takeAsk is one asker's part of a merged take: how many messages it wants,
// and the acks that ride on the take.
type takeAsk struct {
	n    int
	acks []AckReq
}

type takeResult struct {
	msgs    []*Delivery
	limited time.Duration // takeReply's: the queue is at its rate limit
	dropped []error       // takeReply's (AtMostOnce), given to one asker only
	err     error
	ackErrs []error // one per ack of the asker's takeAsk; nil for none, or unsent
}

// takeFor makes one take for askers and shares out what it got, in order,
// with their acks riding on it.
func (s *Shard) takeFor(ctx context.Context, asks []takeAsk, lease time.Duration) []takeResult {
	total := 0
	var acks []AckReq
	for _, a := range asks {
		total += a.n
		acks = append(acks, a.acks...)
	}
	out := make([]takeResult, len(asks))
	r, ackErrs, err := s.takeRiding(ctx, takeArgs{lanes: s.k.highFirst, n: min(total, MaxBatch), lease: lease, guess: true}, acks)
	msgs := r.msgs
	// AtMostOnce (a Range queue of format 4): an entry that did not decode
	// left Redis with the pop and goes nowhere. The first asker's consumer
	// reports it (OnError), once, as a blocking pop's fetch does.
	out[0].dropped = r.dropped
	for i, a := range asks {
		if len(a.acks) > 0 {
			out[i].ackErrs, ackErrs = ackErrs[:len(a.acks):len(a.acks)], ackErrs[len(a.acks):]
		}
		if err != nil {
			out[i].err = err
			continue
		}
		k := min(a.n, len(msgs))
		out[i].msgs, msgs = msgs[:k:k], msgs[k:]
		out[i].limited = r.limited
	}
	return out
}
