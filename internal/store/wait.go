package store

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// wait.go: the blocking waits of a shard's consumers and the wake-ups they
// wait for (keys.go wake, sched, poke): each a call with a deadline, each
// counted while it blocks (CountBlocking).

// doBlocking runs a blocking command of s, counted as waiting.
func (s *Shard) doBlocking(ctx context.Context, a radix.Action) error {
	if n := s.blockUse.Load(); n != nil {
		n.Add(1)
		defer n.Add(-1)
	}
	return s.do(ctx, a)
}

// WaitWake blocks until the wake-up member is there, and pops it (BZPOPMIN),
// or timeout passes on the server: it reports whether it popped it. The call
// has ctx's deadline: callers give it timeout plus BlockMargin.
func (s *Shard) WaitWake(ctx context.Context, timeout time.Duration) (bool, error) {
	var got []string // a fresh receiver per call: radix may write a late reply into it
	err := s.doBlocking(ctx, radix.Cmd(&got, "BZPOPMIN", s.k.wake, fmtSeconds(timeout)))
	return len(got) > 0 && err == nil, err
}

// Woken is what WaitAny popped, if anything.
type Woken struct {
	Wake, Sched, Poke bool
	// Score is the wake-up's score (Wake): minus the best priority made
	// ready since it was last popped, or -inf (see WakePriority).
	Score string
}

// WaitAny blocks until one of the shard's sets has its member, and pops it
// (one BZPOPMIN over them), or timeout passes on the server. It watches, in
// this order, the sched set (with sched; a shard of a queue of several,
// where it is a sorted set), the wake-up (with wake), and poke (a consumer's
// poke key, Keys().Poke; "" for none): Redis pops from the first key that
// has a member. The call has ctx's deadline: callers give it timeout plus
// BlockMargin.
func (s *Shard) WaitAny(ctx context.Context, sched, wake bool, poke string, timeout time.Duration) (Woken, error) {
	var keys []string
	if sched {
		keys = append(keys, s.k.sched)
	}
	if wake {
		keys = append(keys, s.k.wake)
	}
	if poke != "" {
		keys = append(keys, poke)
	}
	var got []string // key, member, score; a fresh receiver per call
	err := s.doBlocking(ctx, radix.Cmd(&got, "BZPOPMIN", append(keys, fmtSeconds(timeout))...))
	if err != nil || len(got) < 3 {
		return Woken{}, err
	}
	switch got[0] {
	case s.k.sched:
		return Woken{Sched: true}, nil
	case s.k.wake:
		return Woken{Wake: true, Score: got[2]}, nil
	}
	return Woken{Poke: true}, nil
}

// RearmWake puts the wake-up member back (a hint: at worst a consumer wakes
// for nothing), for a fetch that gives up on the work it may have been woken
// for. One round trip.
func (s *Shard) RearmWake(ctx context.Context) error {
	return s.do(ctx, radix.Cmd(nil, "ZADD", s.k.wake, "0", wakeMember))
}

// PutWake puts a wake-up of score back (LT: a better one set meanwhile
// stays); "-inf" when what waits is not known. One round trip.
func (s *Shard) PutWake(ctx context.Context, score string) error {
	return s.do(ctx, radix.Cmd(nil, "ZADD", s.k.wake, "LT", score, wakeMember))
}

// pokeMember is the one member of a poke key.
const pokeMember = "p"

// Poke sets the poke key poke (Keys().Poke of a consumer), ending a WaitAny
// that watches it, for ttl at most. One round trip.
func (s *Shard) Poke(ctx context.Context, poke string, ttl time.Duration) error {
	return s.doPipeline(ctx, func() *radix.Pipeline {
		p := radix.NewPipeline()
		p.Append(radix.Cmd(nil, "ZADD", poke, "0", pokeMember))
		p.Append(radix.Cmd(nil, "PEXPIRE", poke, fmtInt(ttl.Milliseconds())))
		return p
	})
}

// WakePriority reads a wake-up's score: the best priority made ready, and
// false when that is not known (-inf, or what does not parse).
func WakePriority(score string) (int64, bool) {
	f, err := strconv.ParseFloat(score, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) > MaxRangePriority {
		return 0, false
	}
	return -int64(f), true
}

// Top is the best priority of the shard's ready messages, false when none
// is ready or the queue is paused (top.lua). One round trip.
func (s *Shard) Top(ctx context.Context) (int64, bool, error) {
	var got string
	keys := append([]string{s.k.paused}, s.k.highFirst...)
	if err := s.do(ctx, s.eval(topScript, &got, keys, s.kind())); err != nil {
		return 0, false, fmt.Errorf("prioq: probe %q: %w", s.name, err)
	}
	if got == "" {
		return 0, false, nil
	}
	p, err := strconv.ParseInt(got, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("prioq: probe %q: %w: %q", s.name, ErrScript, got)
	}
	return p, true, nil
}

// ClosedUnder reports whether err is a call's connection closed under it by
// the shard's Cluster client (see closedUnder): not the caller's doing, and
// a blocking wait may simply go again.
func (s *Shard) ClosedUnder(err error) bool { return closedUnder(s.c, err) }

// BlockMargin is how much longer than its server-side timeout a blocking
// call is given (see blockMargin).
const BlockMargin = blockMargin

// MovedAway reports whether err says that a call's slot is moving between
// cluster nodes (see movedAway).
func MovedAway(err error) bool { return movedAway(err) }

// RedirectBudget and WithRedirectBudget: see redirectBudget (call.go).
const RedirectBudget = redirectBudget

// WithRedirectBudget is withRedirectBudget: see there.
func WithRedirectBudget(ctx context.Context, d time.Duration) context.Context {
	return withRedirectBudget(ctx, d)
}

// What a shard's channel (its wake-up key's name) announces: work made
// ready, an earlier due time scheduled, a resume, a delivery cancelled
// (keys.go wake).
const (
	AnnounceReady = announceReady
	AnnounceDue   = announceDue
	// AnnounceCancelled: see announceCancelled.
	AnnounceCancelled = announceCancelled
	AnnounceResumed   = announceResumed
)
