package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// promote.go: the Redis half of promotions (internal/consume/promoter.go runs
// them): moving due delayed messages into their lanes, reading the next due
// time, and the promoters' wake-up (the sched key).

// WaitSched blocks until the sched marker is there (an enqueue scheduled an
// earlier due time) or timeout passes on the server (BLPOP), and reports
// whether it popped it. The call has ctx's deadline: callers give it timeout
// plus BlockMargin. Counted as a blocking call (CountBlocking).
func (s *Shard) WaitSched(ctx context.Context, timeout time.Duration) (bool, error) {
	var got []string // a fresh receiver per call: radix may write a late reply into it
	err := s.doBlocking(ctx, radix.Cmd(&got, "BLPOP", s.k.sched, fmtSeconds(timeout)))
	return err == nil && len(got) > 0, err
}

// RearmSched puts the sched marker back (a hint: at worst a promoter wakes
// for nothing), for a promoter that stops: one it popped and had not acted
// on would otherwise be gone. One round trip.
func (s *Shard) RearmSched(ctx context.Context) error {
	return s.doPipeline(ctx, func() *radix.Pipeline {
		pl := radix.NewPipeline()
		if s.sharded() { // the sched key is a sorted set there
			pl.Append(radix.Cmd(nil, "ZADD", s.k.sched, "0", dueMember))
			return pl
		}
		pl.Append(radix.Cmd(nil, "RPUSH", s.k.sched, schedMarker))
		pl.Append(radix.Cmd(nil, "LTRIM", s.k.sched, "-1", "-1"))
		return pl
	})
}

// PromoteDue promotes until a call moves fewer than PromoteBatch, each call
// with its own CallTimeout, and returns the last call's time to the next due
// message (-1: none) and server now. The promoter's and a MultiConsumer's
// (internal/consume/multi.go).
func (s *Shard) PromoteDue(ctx context.Context) (next time.Duration, nowMs int64, err error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		moved, next, nowMs, err := s.Promote(cctx)
		cancel()
		if err != nil || moved < s.cfg.PromoteBatch {
			return next, nowMs, err
		}
	}
}

// Promote moves due delayed messages into their lanes, up to PromoteBatch, in
// one Lua call, by the Redis server's clock. It returns how many it moved,
// how long until the next due time (-1: nothing delayed) and the server's now
// (unix ms). When a schedule's next fire time has passed (the call reads
// it), it fires the due schedules (schedules.go) and promotes again: their
// ticks are delayed messages due at their tick times. A queue without
// schedules pays one read of a missing key inside the script.
func (s *Shard) Promote(ctx context.Context) (int, time.Duration, int64, error) {
	moved, next, now, sdue, err := s.promoteAt(ctx, "")
	if err != nil || sdue < 0 || sdue > now {
		return moved, next, now, err
	}
	ferr := s.fireDue(ctx, now)
	more, next, now, _, err := s.promoteAt(ctx, "")
	return moved + more, next, now, errors.Join(ferr, err)
}

// PromoteAt promotes what is due at nowMs ("" = the server's now); tests
// drive it with virtual time. It fires no schedule.
func (s *Shard) PromoteAt(ctx context.Context, nowMs string) (int, time.Duration, int64, error) {
	moved, next, now, _, err := s.promoteAt(ctx, nowMs)
	return moved, next, now, err
}

// promoteAt is PromoteAt, with the first schedule's next fire time (ms, -1:
// none).
func (s *Shard) promoteAt(ctx context.Context, nowMs string) (int, time.Duration, int64, int64, error) {
	var res []int64
	err := s.do(ctx, s.eval(promoteScript, &res, s.k.promoteKeys, nowMs,
		strconv.Itoa(s.cfg.PromoteBatch), s.armFlag(), s.kind()))
	if err != nil {
		return 0, 0, 0, -1, fmt.Errorf("prioq: promote %q: %w", s.name, err)
	}
	if len(res) != 4 {
		return 0, 0, 0, -1, fmt.Errorf("prioq: promote %q: %w", s.name, ErrScript)
	}
	next := time.Duration(-1)
	if res[1] >= 0 {
		next = time.Duration(res[1]) * time.Millisecond
	}
	return int(res[0]), next, res[2], res[3], nil
}

// NextDue reads the next time a promotion has work (unix ms, server clock;
// -1: none): the due time at the head of the delayed set, the time the
// first group parked at its rate limit comes back (gdue), or the first
// schedule's next fire time (sdue), the earliest.
func (s *Shard) NextDue(ctx context.Context) (int64, error) {
	var head, gdue []string
	if err := s.do(ctx, radix.Cmd(&head, "ZRANGE", s.k.delayed, "0", "0", "WITHSCORES")); err != nil {
		return 0, fmt.Errorf("prioq: next due in %q: %w", s.name, err)
	}
	// (A gdue of the wrong type holds no time: the sweep puts its groups
	// back. Once a PromoteWait, so a second round trip costs nothing.)
	if s.cfg.Mode == AtLeastOnce && s.do(ctx, radix.Cmd(&gdue, "ZRANGE", s.k.gdue, "0", "0", "WITHSCORES")) == nil &&
		len(gdue) == 2 && (len(head) < 2 || scoreLess(gdue[1], head[1])) {
		head = gdue
	}
	// The first schedule's next fire time, as gdue (a wrong type: none).
	var sdue []string
	if s.do(ctx, radix.Cmd(&sdue, "ZRANGE", s.k.sdue, "0", "0", "WITHSCORES")) == nil &&
		len(sdue) == 2 && (len(head) < 2 || scoreLess(sdue[1], head[1])) {
		head = sdue
	}
	if len(head) < 2 {
		return -1, nil
	}
	f, err := strconv.ParseFloat(head[1], 64)
	if err != nil {
		return 0, fmt.Errorf("prioq: next due in %q: %w: score %q", s.name, ErrCorrupt, head[1])
	}
	return int64(f), nil
}

// scoreLess compares two sorted-set scores as Redis writes them.
func scoreLess(a, b string) bool {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && x < y
}
