package prioq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// fetcher serves a consumer's Receive, ReceiveBatch and Run with one fetch in
// progress at a time, however many goroutines ask: the fetch runs in its own
// goroutine and parks what it got in held, where the next caller finds it.
// Callers wait on the fetch or their own ctx, whichever ends first, so a
// caller that gives up takes nothing, and nothing already taken is dropped.
type fetcher struct {
	shards       []*shard
	s            *shard          // shards[0]: the queue's one shard, when it has one
	fanin        *fanin          // a queue of several shards (fanin.go), else nil
	cfg          *ConsumerConfig // its consumer's
	bg           context.Context // its consumer's: ends on Close
	report       func(error)
	blockTimeout string // cfg.BlockTimeout in seconds, as Redis takes it
	callTimeout  time.Duration
	multi        *multi // a MultiConsumer's (multi.go), else nil

	mu      sync.Mutex
	held    []*Message    // fetched but not handed out yet: one fetch's messages
	heldAt  time.Time     // when that fetch put them there
	running chan struct{} // closed when the fetch in progress ends; nil if none
	err     error         // the last fetch's error, for the next caller
	waiting int           // callers waiting on the fetch in progress
	closed  bool

	// broken holds the lane keys found holding the wrong type (AtMostOnce:
	// a blocking pop fails on them, so it pops from the others). Used only
	// by the fetch in progress, one at a time.
	broken map[string]bool

	// releasing counts the give-backs of kept messages (receive) still in
	// flight, for Close to wait for.
	releasing sync.WaitGroup
}

// keptLeaseShare bounds how long a leased message may wait in held for a
// later Receive: while less than 1/keptLeaseShare of its lease has passed
// since its fetch ended, it is handed out as it is; after that it is given
// back (release.lua: to the head of its lane, this delivery not counted,
// or nothing if the lease is gone) and the Receive takes again.
//
// Why a tenth: a message waits in held only when the Receive that started
// its fetch gave up (its ctx ended), and the lease kept running meanwhile.
// Handed out late, it reaches its handler with less time than a fresh take
// gives (Run ends the handler's context at the lease), and once the lease
// has ended the sweep may already have delivered it to another consumer:
// the kept copy would then run beside the redelivery (two handlers of a
// concurrency-1 group at once). A handler is sized to its Lease; a tenth
// leaves it at least 90% of it. The common case (Receive in a loop with a
// short ctx, the next call at once) hands the message out within
// microseconds, and the price of a message kept longer is two round trips
// (the give-back and the take), which also let the take serve work of a
// higher priority that came meanwhile. Extending the kept lease instead
// would cost one round trip, but hand out a message that may no longer be
// the best one ready.
const keptLeaseShare = 10

// staleHeld removes from held, and returns, the leased messages that may
// not be handed out any more (see keptLeaseShare), and those whose lease
// has ended by this host's clock (a take slower than the lease). Callers
// hold f.mu.
func (f *fetcher) staleHeld(now time.Time) []*Message {
	kept := now.Sub(f.heldAt)
	var stale []*Message
	fresh := f.held[:0:0]
	for _, m := range f.held {
		if !m.deadline.IsZero() && (kept*keptLeaseShare > f.cfg.Lease || !now.Before(m.deadline)) {
			stale = append(stale, m)
		} else {
			fresh = append(fresh, m)
		}
	}
	if len(stale) > 0 {
		f.held = fresh
	}
	return stale
}

// releaseKept gives back leased messages kept too long (staleHeld), with a
// deadline of its own, and waits for it until ctx ends (the give-back goes
// on after that; Close waits for it). A give-back that fails leaves the
// messages to their leases: the sweep delivers them again when they end.
func (f *fetcher) releaseKept(ctx context.Context, stale []*Message) error {
	f.releasing.Add(1)
	done := make(chan struct{})
	go func() {
		defer f.releasing.Done()
		defer close(done)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.callTimeout)
		defer cancel()
		for s, group := range byShard(stale) {
			tokens := make([]string, len(group))
			for i, m := range group {
				tokens[i] = m.token
			}
			if _, err := s.release(rctx, tokens); err != nil {
				f.report(fmt.Errorf("prioq: receive from %q: giving back %d messages kept past a tenth of their lease: %w",
					s.name, len(group), err))
			}
		}
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newFetcher(shards []*shard, cfg *ConsumerConfig, bg context.Context, report func(error)) *fetcher {
	f := &fetcher{shards: shards, s: shards[0], cfg: cfg, bg: bg, report: report, blockTimeout: fmtSeconds(cfg.BlockTimeout),
		callTimeout: shards[0].cfg.CallTimeout}
	if len(shards) > 1 {
		f.fanin = newFanin(len(shards))
	}
	return f
}

func (f *fetcher) receive(ctx context.Context, n int) ([]*Message, error) {
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return nil, ErrClosed
		}
		if stale := f.staleHeld(time.Now()); len(stale) > 0 {
			f.mu.Unlock()
			if err := f.releaseKept(ctx, stale); err != nil {
				return nil, err
			}
			continue
		}
		if len(f.held) > 0 {
			k := min(n, len(f.held))
			out := append([]*Message(nil), f.held[:k]...)
			f.held = f.held[k:]
			f.mu.Unlock()
			f.releaseIDs(ctx, out)
			return out, nil
		}
		if f.running == nil {
			if err := f.err; err != nil {
				f.err = nil
				f.mu.Unlock()
				return nil, err
			}
			if err := ctx.Err(); err != nil {
				f.mu.Unlock()
				return nil, err
			}
			f.running = make(chan struct{})
			go f.fetch(f.running, n)
		}
		done := f.running
		f.waiting++
		f.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.waiting--
		f.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// popsLanes reports whether the fetch waits in a blocking pop on the lanes
// (AtMostOnce, one shard, not a Range queue of format 4): Close must let
// such a pop end by itself. Every other fetch waits on wake-ups.
func (f *fetcher) popsLanes() bool {
	return f.multi == nil && f.fanin == nil && f.s.cfg.Mode == AtMostOnce && !f.s.lists()
}

// stillWanted reports whether anyone waits for the fetch in progress.
func (f *fetcher) stillWanted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting > 0 && !f.closed
}

// close stops new fetches. It returns the fetch in progress (nil if none) and
// whether this was the first call.
func (f *fetcher) close() (running chan struct{}, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, false
	}
	f.closed = true
	return f.running, true
}

// takeHeld empties held, for Close to give the messages back.
func (f *fetcher) takeHeld() []*Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := f.held
	f.held = nil
	return held
}

// fetch runs one fetch and parks its result in held / err. It does not use the
// caller's context: abandoning a blocking pop would close its connection, and
// a message popped in that instant would be lost. Each fetch ends by itself
// within BlockTimeout, or at its calls' deadlines when Redis does not answer.
func (f *fetcher) fetch(done chan struct{}, n int) {
	c := f
	var msgs []*Message
	var err error
	switch {
	case f.multi != nil:
		msgs, err = f.multi.fetch(f, n)
	case f.fanin != nil:
		msgs, err = f.fetchFanIn(n)
	case f.s.cfg.Mode == AtLeastOnce:
		msgs, err = f.fetchLeased(n, f.cfg.Lease)
	case f.s.lists():
		// No blocking pop takes a Range (format 4) message: wait on the
		// wake-up, take with take.lua and no lease.
		msgs, err = f.fetchLeased(n, 0)
	default:
		msgs, err = f.fetchPopped(n)
	}
	f.mu.Lock()
	if f.closed {
		// Close is waiting for this fetch, or stopped waiting (its ctx ended
		// first): give back what it took and what was still held before
		// saying the fetch is over, so that a Close that sees it end returns
		// only once they are back.
		giveBack := append(f.held, msgs...)
		f.held = nil
		f.mu.Unlock()
		if len(giveBack) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), f.callTimeout)
			if err := f.giveBack(ctx, giveBack); err != nil {
				c.report(err)
			}
			cancel()
		}
		f.mu.Lock()
	} else if len(msgs) > 0 {
		f.held = append(f.held, msgs...)
		f.heldAt = time.Now()
	}
	if err != nil && c.bg.Err() == nil {
		f.err = err
	}
	f.running = nil
	close(done)
	f.mu.Unlock()
}

// laneOrder returns the lane keys in the order to serve them this fetch:
// the queue's fixed highest-first list, or a weighted draw.
func (f *fetcher) laneOrder() []string {
	c, q := f, f.s
	if c.cfg.Weights == nil {
		return q.k.highFirst
	}
	n := len(q.k.lanes)
	order := make([]string, 0, n)
	// Weighted draw without replacement, then the zero-weight lanes, highest first.
	w := append([]int(nil), c.cfg.Weights...)
	total := 0
	for _, x := range w {
		total += x
	}
	for total > 0 {
		r := rand.IntN(total)
		for i := n - 1; i >= 0; i-- {
			if r < w[i] {
				order = append(order, q.k.lanes[i])
				total -= w[i]
				w[i] = 0
				break
			}
			r -= w[i]
		}
	}
	for i := n - 1; i >= 0; i-- {
		if c.cfg.Weights[i] == 0 {
			order = append(order, q.k.lanes[i])
		}
	}
	return order
}

// blockingCmd issues commands radix v4.1.4 does not know to be blocking
// (BLMPOP, BZMPOP) on a connection of their own: shared, they would stall
// every command queued behind them on that connection.
var blockingCmd = radix.CmdConfig{ActionProperties: func(cmd string, args ...string) radix.ActionProperties {
	p := radix.DefaultActionProperties(cmd, args...)
	p.CanShareConn, p.CanPipeline = false, false
	return p
}}

// fetchPopped is the AtMostOnce fetch: one multi-key blocking pop over the
// lanes in serving order. Redis serves the first non-empty key, which is what
// makes the order strict, and hands each element to exactly one waiting client.
// A lane key of the wrong type fails the pop before it pops anything: the
// fetch then finds which lanes are broken, reports them, and pops from the
// others (looking at the broken ones again on every later fetch, so a mended
// lane is served again).
func (f *fetcher) fetchPopped(n int) ([]*Message, error) {
	c, q := f, f.s
	if len(f.broken) > 0 {
		if err := f.findBroken(); err != nil {
			return nil, fmt.Errorf("prioq: receive from %q: %w", q.name, err)
		}
	}
	key, entries, err := f.pop(n)
	if isReply(err) && strings.Contains(err.Error(), "WRONGTYPE") {
		if ferr := f.findBroken(); ferr != nil {
			return nil, fmt.Errorf("prioq: receive from %q: %w", q.name, ferr)
		}
		if len(f.broken) > 0 {
			key, entries, err = f.pop(n)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("prioq: receive from %q: %w", q.name, err)
	}
	lane, ok := q.k.laneIndex[key]
	if !ok && len(entries) > 0 {
		return nil, fmt.Errorf("prioq: receive from %q: %w: popped from unknown key %q", q.name, ErrScript, key)
	}
	msgs := make([]*Message, 0, len(entries))
	for _, b := range entries {
		e, err := q.decodeLaneEntry(b)
		if err != nil {
			// Nowhere to report it but OnError: at-most-once has no dead letters.
			c.report(fmt.Errorf("prioq: receive from %q: dropped entry of lane %d: %w", q.name, lane, err))
			continue
		}
		m := newMessage(e, q)
		m.Attempts = 0
		m.raw, m.lane = b, lane
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// pop is fetchPopped's blocking pop over the lanes not known to be broken,
// with a deadline of its own: abandoning a blocking pop early would close its
// connection, and a message popped in that instant would be lost.
func (f *fetcher) pop(n int) (key string, entries [][]byte, err error) {
	c, q := f, f.s
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.BlockTimeout+blockMargin)
	defer cancel()
	keys, timeout := f.laneOrder(), c.blockTimeout
	if len(f.broken) > 0 {
		keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return f.broken[k] })
		if len(keys) == 0 {
			return "", nil, fmt.Errorf("%w: every lane key holds the wrong type", ErrCorrupt)
		}
	}
	switch {
	case n == 1 && !q.isRange(): // BLPOP: Redis ≥ 2.0
		var r [][]byte
		err = q.doBlocking(ctx, radix.Cmd(&r, "BLPOP", append(keys, timeout)...))
		if err == nil && len(r) == 2 {
			key, entries = string(r[0]), r[1:]
		}
	case n == 1: // BZPOPMIN: Redis ≥ 5.0
		var r [][]byte
		err = q.doBlocking(ctx, radix.Cmd(&r, "BZPOPMIN", append(keys, timeout)...))
		if err == nil && len(r) == 3 {
			key, entries = string(r[0]), r[1:2]
		}
	default: // BLMPOP / BZMPOP: Redis ≥ 7.0
		args := append([]string{timeout, strconv.Itoa(len(keys))}, keys...)
		var mb radix.Maybe
		if q.isRange() {
			var pairs [][][]byte // [member, score] pairs
			mb.Rcv = radix.Tuple{&key, &pairs}
			err = q.doBlocking(ctx, blockingCmd.Cmd(&mb, "BZMPOP", append(args, "MIN", "COUNT", strconv.Itoa(n))...))
			if err == nil {
				for _, p := range pairs {
					if len(p) > 0 {
						entries = append(entries, p[0])
					}
				}
			}
		} else {
			mb.Rcv = radix.Tuple{&key, &entries}
			err = q.doBlocking(ctx, blockingCmd.Cmd(&mb, "BLMPOP", append(args, "LEFT", "COUNT", strconv.Itoa(n))...))
		}
		if mb.Null {
			// The timeout's null reply: nothing popped. (radix v4.1.4's Maybe
			// still unmarshals it into its Tuple, which fails on the null
			// array: "expected array of size 2 but got array of size 0".)
			key, entries, err = "", nil, nil
		}
	}
	return key, entries, err
}

// findBroken asks the type of every lane key in one round trip and records
// which ones hold the wrong type, reporting each newly broken one.
func (f *fetcher) findBroken() error {
	c, q := f, f.s
	lanes := q.k.lanes
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.CallTimeout)
	defer cancel()
	want := "list"
	if q.isRange() {
		want = "zset"
	}
	var types []string
	err := q.doPipeline(ctx, func() *radix.Pipeline {
		types = make([]string, len(lanes))
		p := radix.NewPipeline()
		for i, k := range lanes {
			p.Append(radix.Cmd(&types[i], "TYPE", k))
		}
		return p
	})
	if err != nil {
		return err
	}
	broken := make(map[string]bool)
	for i, k := range lanes {
		if types[i] != "none" && types[i] != want {
			broken[k] = true
			if !f.broken[k] {
				c.report(fmt.Errorf("prioq: receive from %q: %w: lane %s is a %s, not a %s: its messages wait until it is mended",
					q.name, ErrCorrupt, k, types[i], want))
			}
		}
	}
	f.broken = broken
	return nil
}

// fetchLeased is the AtLeastOnce fetch: take (pop + lease in one script); when
// nothing is ready, block on the wake-up marker until work may be there, then
// take again. A wait that times out is simply repeated, without a take, while
// a caller still wants the result: an idle consumer sends one command per
// BlockTimeout. (A marker lost with a killed consumer is re-armed by the lease
// sweep, so waiting instead of polling never strands ready work.) Waiting uses
// the consumer's background context, so Close interrupts it at once: the
// marker is only a hint, and a marker lost with the closed connection is put
// back.
//
// With lease 0 it is the AtMostOnce fetch of a Range queue of format 4: the
// same, without leases; with no sweep to re-arm a wake-up lost with a killed
// consumer, a wait that times out takes too (one script per BlockTimeout per
// idle consumer).
func (f *fetcher) fetchLeased(n int, lease time.Duration) ([]*Message, error) {
	c, q := f, f.s
	takeOnce := func() takeResult {
		if c.cfg.Weights == nil {
			// The queue's fixed order: merged with its other consumers' takes.
			return q.takeMerged(c.bg, n, lease)
		}
		// Not derived from c.bg: a take abandoned by Close would lease a
		// message nobody holds until its lease ran out. It ends by itself.
		ctx, cancel := context.WithTimeout(context.Background(), q.cfg.CallTimeout)
		defer cancel()
		r, err := q.takeFrom(ctx, takeArgs{lanes: f.laneOrder(), n: n, lease: lease})
		return takeResult{msgs: r.msgs, limited: r.limited, dropped: r.dropped, err: err}
	}
	// take is takeOnce, and while the queue is at its rate limit, a sleep
	// until its next message may be taken (at most BlockTimeout, so that a
	// raised limit is seen, and only while a caller still wants the result)
	// and a take again: the take says when, so this is no polling.
	//
	// The wake-up this consumer may have popped stays with it while it
	// sleeps (the others need not wake to find the queue at its limit), and
	// is put back when it gives up: closed, or wanted by nobody.
	take := func() ([]*Message, error) {
		for {
			r := takeOnce()
			for _, d := range r.dropped {
				// Nowhere to report it but OnError: AtMostOnce has no dead letters.
				c.report(d)
			}
			if r.err != nil || len(r.msgs) > 0 || r.limited <= 0 {
				return r.msgs, r.err
			}
			t := time.NewTimer(min(r.limited, c.cfg.BlockTimeout))
			select {
			case <-t.C:
			case <-c.bg.Done():
				t.Stop()
				f.rearmWake()
				return nil, ErrClosed
			}
			if !f.stillWanted() {
				f.rearmWake()
				return nil, nil
			}
		}
	}
	msgs, err := take()
	if err != nil || len(msgs) > 0 {
		return msgs, err
	}
	for {
		ctx, cancel := context.WithTimeout(c.bg, c.cfg.BlockTimeout+blockMargin)
		var got []string
		err := q.doBlocking(ctx, radix.Cmd(&got, "BZPOPMIN", q.k.wake, c.blockTimeout))
		cancel()
		if err != nil {
			if c.bg.Err() != nil {
				f.rearmWake()
				return nil, ErrClosed
			}
			if closedUnder(q.c, err) {
				return take() // the wake-up may have gone with the pool
			}
			return nil, fmt.Errorf("prioq: wait on %q: %w", q.name, err)
		}
		if len(got) > 0 {
			return take()
		}
		if lease == 0 {
			if msgs, err := take(); err != nil || len(msgs) > 0 {
				return msgs, err
			}
		}
		if !f.stillWanted() {
			return nil, nil
		}
	}
}

// rearmWake puts the wake-up member back (a hint: at worst a consumer wakes
// for nothing), for a fetch that gives up on the work it may have been woken
// for.
func (f *fetcher) rearmWake() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = f.s.do(ctx, radix.Cmd(nil, "ZADD", f.s.k.wake, "0", wakeMember))
}

// releaseIDs frees the caller ids of AtMostOnce messages as they are handed
// out: from then on the message exists only in this process, and its id may
// be enqueued again. (Held, not handed out, it keeps the id: Close gives it
// back.) It runs with ctx, one call per shard; if ctx ends first, the release
// (an idempotent SREM) goes on with a deadline of its own after the messages
// are returned. If that fails too, the id stays taken until Purge; the error
// goes to OnError.
func (f *fetcher) releaseIDs(ctx context.Context, msgs []*Message) {
	// A consumer's messages share one mode (a MultiConsumer's: AtLeastOnce).
	if len(msgs) == 0 || msgs[0].s.cfg.Mode != AtMostOnce {
		return
	}
	for s, group := range byShard(msgs) {
		var ids []string
		for _, m := range group {
			if m.callerID {
				ids = append(ids, m.ID)
			}
		}
		if len(ids) > 0 {
			f.releaseIDsOf(ctx, s, ids)
		}
	}
}

func (f *fetcher) releaseIDsOf(ctx context.Context, s *shard, ids []string) {
	release := func(ctx context.Context) error {
		return s.do(ctx, radix.Cmd(nil, "SREM", append([]string{s.k.ids}, ids...)...))
	}
	if ctx.Err() == nil {
		if err := release(ctx); err == nil || ctx.Err() == nil {
			if err != nil {
				f.report(fmt.Errorf("prioq: receive from %q: releasing ids: %w", s.name, err))
			}
			return
		}
	}
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CallTimeout)
		defer cancel()
		if err := release(rctx); err != nil {
			f.report(fmt.Errorf("prioq: receive from %q: releasing ids: %w", s.name, err))
		}
	}()
}

// byShard groups messages by the shard they came from, keeping their order.
func byShard(msgs []*Message) map[*shard][]*Message {
	out := make(map[*shard][]*Message, 1)
	for _, m := range msgs {
		out[m.s] = append(out[m.s], m)
	}
	return out
}

// giveBack gives held messages back, one round trip per shard they came
// from: AtLeastOnce ones with release.lua (not a write that WAITs for
// replicas: it acknowledges nothing), AtMostOnce ones to the head of their
// lanes in one pipeline. An AtMostOnce message held keeps its caller id
// reserved until it is handed out (see fetcher.receive), so putting it back
// needs no id.
func (f *fetcher) giveBack(ctx context.Context, held []*Message) error {
	var errs []error
	for s, group := range byShard(held) {
		if err := f.giveBackTo(ctx, s, group); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (f *fetcher) giveBackTo(ctx context.Context, q *shard, held []*Message) error {
	if q.cfg.Mode == AtLeastOnce {
		tokens := make([]string, len(held))
		for i, m := range held {
			tokens[i] = m.token
		}
		if _, err := q.release(ctx, tokens); err != nil {
			return fmt.Errorf("prioq: close consumer of %q: %w", q.name, err)
		}
		return nil
	}
	// Each command is judged alone: one into a lane key of the wrong type
	// fails, and its message, having nowhere else to go (AtMostOnce has no
	// dead letters), is lost: reported, and its caller id released. One a
	// cluster node refused because the slot is moving goes again after a
	// wait (a lane's messages fail or pass together, so they keep their
	// order).
	var lost []*Message
	var err, refused error
	wait := 5 * time.Millisecond
	for pending := held; len(pending) > 0; {
		pushed := make([]int64, len(pending)) // a command's reply; -1 until it arrives
		p := radix.NewPipeline()
		var tx *namedTx // Range (format 4), Levels (format 5): the pushes, newest first
		if q.lists() || q.filled() {
			tx = &namedTx{s: q, cmd: "LPUSH"}
		}
		for i := len(pending) - 1; i >= 0; i-- { // LPUSH in reverse keeps their order
			m := pending[i]
			pushed[i] = -1
			switch {
			case tx != nil:
				u := q.namedPush(m.lane, m.Priority)
				u.vals = []string{string(m.raw)}
				tx.pushes = append(tx.pushes, u)
			case q.isRange():
				p.Append(radix.Cmd(&pushed[i], "ZADD", q.k.lanes[m.lane], scoreOf(m.Priority), string(m.raw)))
			default:
				p.Append(radix.Cmd(&pushed[i], "LPUSH", q.k.lanes[m.lane], string(m.raw)))
			}
		}
		if tx != nil {
			tx.appendTo(p)
		}
		err = q.do(ctx, p)
		if tx != nil {
			lengths, errs := tx.results(ctx, err)
			for k, n := range lengths {
				if i := len(pending) - 1 - k; n > 0 {
					pushed[i] = n
				}
			}
			// Refused inside the transaction (EXEC itself succeeded): why.
			refused = errors.Join(errs...)
		}
		if err != nil && !isReply(err) {
			return fmt.Errorf("prioq: close consumer of %q: putting back %d messages: %w", q.name, len(pending), err)
		}
		var failed []*Message
		for i, m := range pending {
			if pushed[i] < 0 {
				failed = append(failed, m)
			}
		}
		pending = nil
		if isRedirect(err) && sleepCtx(ctx, wait) {
			pending, wait = failed, min(2*wait, 100*time.Millisecond)
		} else {
			lost = failed
		}
	}
	if back := len(held) - len(lost); back > 0 && q.wakes() {
		// A queue of several shards: its consumers learn of work from the
		// wake-up, not from a blocking pop on the lanes.
		best := int64(math.MinInt64)
		for _, m := range held {
			if !slices.Contains(lost, m) {
				best = max(best, m.Priority)
			}
		}
		if werr := q.do(ctx, radix.Cmd(nil, "ZADD", q.k.wake, "LT", fmtInt(-best), wakeMember)); werr != nil {
			f.report(fmt.Errorf("prioq: close consumer of %q: setting the wake-up: %w", q.name, werr))
		}
	}
	if len(lost) == 0 {
		return nil
	}
	f.releaseIDs(ctx, lost)
	return fmt.Errorf("prioq: close consumer of %q: %d of %d messages lost, their lane refused them: %w", q.name, len(lost), len(held), cmp.Or(err, refused))
}
