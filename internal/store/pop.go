package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// pop.go: the calls of an AtMostOnce consumer of a queue of one shard whose
// lanes it pops itself (Levels, RangeSorted): the blocking pop, the lanes'
// types when a pop meets a wrong one, the put-back of what it never handed
// out, and the release of caller ids.

// blockingCmd issues commands radix v4.1.4 does not know to be blocking
// (BLMPOP, BZMPOP) on a connection of their own: shared, they would stall
// every command queued behind them on that connection.
var blockingCmd = radix.CmdConfig{ActionProperties: func(cmd string, args ...string) radix.ActionProperties {
	p := radix.DefaultActionProperties(cmd, args...)
	p.CanShareConn, p.CanPipeline = false, false
	return p
}}

// PopLanes is one multi-key blocking pop of up to n messages over the lane
// keys lanes, in serving order, waiting up to timeout on the server: Redis
// serves the first non-empty key, which is what makes the order strict, and
// hands each element to exactly one waiting client. Without a message
// before timeout it returns none. An entry that does not decode left Redis
// with the pop and goes nowhere (AtMostOnce has no dead letters): it is in
// dropped, for the caller to report.
//
// It takes no ctx: the call has a deadline of its own (timeout plus
// BlockMargin), because abandoning a blocking pop early would close its
// connection, and a message popped in that instant would be lost. A lane
// key of the wrong type fails the pop before it pops anything (IsWrongType).
func (s *Shard) PopLanes(lanes []string, n int, timeout time.Duration) (ds []*Delivery, dropped []error, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+blockMargin)
	defer cancel()
	key, entries, err := s.pop(ctx, lanes, n, fmtSeconds(timeout))
	if err != nil {
		return nil, nil, err
	}
	lane, ok := s.k.laneIndex[key]
	if !ok && len(entries) > 0 {
		return nil, nil, fmt.Errorf("%w: popped from unknown key %q", ErrScript, key)
	}
	ds = make([]*Delivery, 0, len(entries))
	for _, b := range entries {
		e, err := s.decodeLaneEntry(b)
		if err != nil {
			dropped = append(dropped, fmt.Errorf("prioq: receive from %q: dropped entry of lane %d: %w", s.name, lane, err))
			continue
		}
		d := newDelivery(e, s)
		d.Attempts = 0
		d.raw, d.lane = b, lane
		ds = append(ds, d)
	}
	ds, late := s.lateOnes(context.Background(), ds) // no lease: nothing to call
	return ds, append(dropped, late...), nil
}

// pop is PopLanes's command: BLPOP or BZPOPMIN for one message, BLMPOP or
// BZMPOP for more.
func (s *Shard) pop(ctx context.Context, keys []string, n int, timeout string) (key string, entries [][]byte, err error) {
	switch {
	case n == 1 && !s.isRange(): // BLPOP: Redis ≥ 2.0
		var r [][]byte
		err = s.doBlocking(ctx, radix.Cmd(&r, "BLPOP", append(slices.Clip(keys), timeout)...))
		if err == nil && len(r) == 2 {
			key, entries = string(r[0]), r[1:]
		}
	case n == 1: // BZPOPMIN: Redis ≥ 5.0
		var r [][]byte
		err = s.doBlocking(ctx, radix.Cmd(&r, "BZPOPMIN", append(slices.Clip(keys), timeout)...))
		if err == nil && len(r) == 3 {
			key, entries = string(r[0]), r[1:2]
		}
	default: // BLMPOP / BZMPOP: Redis ≥ 7.0
		args := append([]string{timeout, strconv.Itoa(len(keys))}, keys...)
		var mb radix.Maybe
		if s.isRange() {
			var pairs [][][]byte // [member, score] pairs
			mb.Rcv = radix.Tuple{&key, &pairs}
			err = s.doBlocking(ctx, blockingCmd.Cmd(&mb, "BZMPOP", append(args, "MIN", "COUNT", strconv.Itoa(n))...))
			if err == nil {
				for _, p := range pairs {
					if len(p) > 0 {
						entries = append(entries, p[0])
					}
				}
			}
		} else {
			mb.Rcv = radix.Tuple{&key, &entries}
			err = s.doBlocking(ctx, blockingCmd.Cmd(&mb, "BLMPOP", append(args, "LEFT", "COUNT", strconv.Itoa(n))...))
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

// IsWrongType reports whether err is Redis's refusal of a command on a key
// of the wrong type (WRONGTYPE).
func IsWrongType(err error) bool { return isReply(err) && strings.Contains(err.Error(), "WRONGTYPE") }

// WrongLanes asks the type of every lane key in one round trip and returns
// those that hold another type than lanes do (want: "list" or "zset"), with
// their type.
func (s *Shard) WrongLanes(ctx context.Context) (broken map[string]string, want string, err error) {
	lanes := s.k.lanes
	want = "list"
	if s.isRange() {
		want = "zset"
	}
	var types []string
	err = s.doPipeline(ctx, func() *radix.Pipeline {
		types = make([]string, len(lanes))
		p := radix.NewPipeline()
		for i, k := range lanes {
			p.Append(radix.Cmd(&types[i], "TYPE", k))
		}
		return p
	})
	if err != nil {
		return nil, want, err
	}
	broken = make(map[string]string)
	for i, k := range lanes {
		if types[i] != "none" && types[i] != want {
			broken[k] = types[i]
		}
	}
	return broken, want, nil
}

// ReleaseIDs frees caller ids (SREM from the ids set): of AtMostOnce
// messages handed out, which then exist only in their process. Idempotent.
// One round trip.
func (s *Shard) ReleaseIDs(ctx context.Context, ids []string) error {
	return s.do(ctx, radix.Cmd(nil, "SREM", append([]string{s.k.ids}, ids...)...))
}

// PutBack gives AtMostOnce deliveries back to the head of their lanes, in
// their order, in one pipeline, and sets the wake-up when the shard's
// consumers wait on it. Each command is judged alone: one into a lane key
// of the wrong type fails, and its message, having nowhere else to go
// (AtMostOnce has no dead letters), is lost: returned in lost, with an
// error saying so (the caller releases their ids). One a cluster node
// refused because the slot is moving goes again after a wait (a lane's
// messages fail or pass together, so they keep their order). A wake-up that
// could not be set goes to report. A caller id stays reserved while its
// message is held, so putting it back needs none.
func (s *Shard) PutBack(ctx context.Context, held []*Delivery, report func(error)) (lost []*Delivery, err error) {
	var refused error
	wait := 5 * time.Millisecond
	for pending := held; len(pending) > 0; {
		pushed := make([]int64, len(pending)) // a command's reply; -1 until it arrives
		p := radix.NewPipeline()
		var tx *namedTx // Range (format 4), Levels (format 5): the pushes, newest first
		if s.lists() || s.filled() {
			tx = &namedTx{s: s, cmd: "LPUSH"}
		}
		for i := len(pending) - 1; i >= 0; i-- { // LPUSH in reverse keeps their order
			m := pending[i]
			pushed[i] = -1
			switch {
			case tx != nil:
				u := s.namedPush(m.lane, m.Priority)
				u.vals = []string{string(m.raw)}
				tx.pushes = append(tx.pushes, u)
			case s.isRange():
				p.Append(radix.Cmd(&pushed[i], "ZADD", s.k.lanes[m.lane], scoreOf(m.Priority), string(m.raw)))
			default:
				p.Append(radix.Cmd(&pushed[i], "LPUSH", s.k.lanes[m.lane], string(m.raw)))
			}
		}
		if tx != nil {
			tx.appendTo(p)
		}
		err = s.do(ctx, p)
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
			return nil, fmt.Errorf("prioq: close consumer of %q: putting back %d messages: %w", s.name, len(pending), err)
		}
		var failed []*Delivery
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
	if back := len(held) - len(lost); back > 0 && s.wakes() {
		// A queue of several shards: its consumers learn of work from the
		// wake-up, not from a blocking pop on the lanes.
		best := int64(math.MinInt64)
		for _, m := range held {
			if !slices.Contains(lost, m) {
				best = max(best, m.Priority)
			}
		}
		if werr := s.do(ctx, radix.Cmd(nil, "ZADD", s.k.wake, "LT", fmtInt(-best), wakeMember)); werr != nil {
			report(fmt.Errorf("prioq: close consumer of %q: setting the wake-up: %w", s.name, werr))
		}
	}
	if len(lost) == 0 {
		return nil, nil
	}
	return lost, fmt.Errorf("prioq: close consumer of %q: %d of %d messages lost, their lane refused them: %w", s.name, len(lost), len(held), cmp.Or(err, refused))
}
