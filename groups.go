package prioq

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/mediocregopher/radix/v4"
)

// Groups share a queue fairly among the tenants (or any other keys) that use
// it. A message enqueued with Group(key) waits in its group's list beside its
// lane (keys.go), and the lane holds one marker of the group in its place:
// a take that meets the marker takes the group's oldest message and puts the
// marker back at the lane's tail while the group has more. So within a
// priority the groups with work are served in turn, each first in, first
// out, and a group that enqueued 100,000 messages gets one turn in each
// round like a group that enqueued 10; across priorities higher still goes
// first. Messages without a group keep their place in the lane as before and
// cost what they cost before.
//
// A group's concurrency limit (SetGroupLimit) bounds its messages in flight
// across every consumer and process: counted when a take leases one, and
// given back when its lease ends (Ack, Retry, a dead letter, Close, or the
// sweep of an expired lease, so a killed consumer's slot comes back when its
// lease expires and never before). A group at its limit is skipped: its
// marker is parked, the other groups are served, and the marker goes back to
// its lane when one of the group's leases ends, waking a consumer (no
// polling).
//
// Groups need AtLeastOnce (their limits count leases) and lists: Levels, or
// Range of storage format 4 (not RangeSorted). In a queue of several shards
// a group lives in the shard its key hashes to, so its order and its limit
// are exact.

// maxGroupLen is the longest group key (the envelope keeps its length in
// one byte).
const maxGroupLen = 128

// validateGroup checks a group key: 1..128 printable ASCII bytes, no space
// (the rules of ids: it is part of key names and of the envelope).
func validateGroup(g string) error {
	if len(g) == 0 || len(g) > maxGroupLen {
		return fmt.Errorf("%w: group of %d bytes (want 1..%d)", ErrInvalidOption, len(g), maxGroupLen)
	}
	if i := unprintable(g); i >= 0 {
		return fmt.Errorf("%w: group has byte %#x at %d (want printable ASCII, no space)", ErrInvalidOption, g[i], i)
	}
	return nil
}

// Group puts the message in group key (a tenant, a customer): see the
// package's groups. Needs an AtLeastOnce queue of Levels or Range layout
// (ErrWrongMode, ErrInvalidOption otherwise). In a queue of several shards
// the group decides the shard (with OrderingKey, or with ID, too:
// ErrInvalidOption; see ID).
func Group(key string) Option {
	return func(o *sendOptions) {
		if err := validateGroup(key); err != nil {
			o.err = err
		}
		o.group = key
	}
}

// checkGroup says whether a queue with cfg can hold messages of a group.
func checkGroup(cfg *Config, o *sendOptions) error {
	switch {
	case cfg.Mode != AtLeastOnce:
		return fmt.Errorf("%w: groups need AtLeastOnce (their limits count leases)", ErrWrongMode)
	case cfg.Layout.seqMembers:
		return fmt.Errorf("%w: groups need lists: Levels or Range, not RangeSorted", ErrInvalidOption)
	case o.orderingKey != "":
		return fmt.Errorf("%w: Group and OrderingKey both choose the shard", ErrInvalidOption)
	}
	return nil
}

// GroupLimit bounds a group's messages: in flight at once (Concurrency, 0
// for no bound) and taken per window (Rate, the zero Rate for none; see the
// package's rate limits).
type GroupLimit struct {
	Concurrency int
	Rate        Rate
}

// SetGroupLimit stores group's limits in Redis, where every consumer of the
// queue reads them at its next take; group "" sets the limits of every group
// without its own (a group's own limits replace every group's whole: a group
// given a concurrency alone has no rate limit). The zero GroupLimit removes
// them. The groups waiting at a limit are put back in their lanes at once
// and a consumer woken, so that a raised limit applies without waiting for a
// lease to end or a window to pass (a group still at its new limit is parked
// again by its next take). One round trip per shard.
func (q *Queue) SetGroupLimit(ctx context.Context, group string, l GroupLimit) error {
	if group != "" {
		if err := validateGroup(group); err != nil {
			return err
		}
	}
	if l.Concurrency < 0 {
		return fmt.Errorf("%w: negative concurrency %d", ErrInvalidOption, l.Concurrency)
	}
	if err := l.Rate.validate(); err != nil {
		return err
	}
	if q.cfg.Mode != AtLeastOnce {
		return fmt.Errorf("prioq: set group limit of %q: %w", q.name, ErrWrongMode)
	}
	if q.cfg.Layout.seqMembers {
		// No message of a group can be stored there (checkGroup): a limit
		// would be a key that nothing reads.
		return fmt.Errorf("%w: set group limit of %q: groups need lists: Levels or Range, not RangeSorted", ErrInvalidOption, q.name)
	}
	return q.eachShard(func(_ int, s *shard) error {
		err := s.do(ctx, s.eval(groupLimitScript, nil, []string{s.k.glimits, s.k.gpark, s.k.wake, s.k.lanes[0]},
			s.kind(), group, fmtLimit(l.Concurrency, l.Rate), strconv.Itoa(len(s.k.lanes))))
		if err != nil {
			return fmt.Errorf("prioq: set group limit of %q: %w", q.name, err)
		}
		return nil
	})
}

// GroupStats are one group's figures (Groups).
type GroupStats struct {
	Group string
	// Ready is how many of its messages wait in its lists.
	Ready int64
	// InFlight is how many of its messages are leased.
	InFlight int64
	// Parked reports whether it waits at a limit (its concurrency or its
	// rate), skipped by takes; RateParked, at its rate limit.
	Parked, RateParked bool
	// Limit is its concurrency limit and Rate its rate limit (its own, or
	// every group's; 0 and the zero Rate: none).
	Limit int
	Rate  Rate
}

// Groups returns the figures of the groups with messages waiting or in
// flight, the most loaded first (Ready + InFlight, then name), at most n
// (n <= 0: all). It reads every group's counts and the lease tokens of the
// groups that may have messages in flight (keys.go gflight), never a
// message: O(groups + their messages in flight), two round trips per shard.
func (q *Queue) Groups(ctx context.Context, n int) ([]GroupStats, error) {
	type counts struct {
		ready, park, limits map[string]string
		due                 []string // gdue: group, time, ...
		inflight            []string // group, count, ...
	}
	per := make([]counts, len(q.shards))
	err := q.eachShard(func(i int, s *shard) error {
		c := &per[i]
		err := s.doPipeline(ctx, func() *radix.Pipeline {
			*c = counts{}
			p := radix.NewPipeline()
			p.Append(radix.Cmd(&c.ready, "HGETALL", s.k.gready))
			p.Append(radix.Cmd(&c.park, "HGETALL", s.k.gpark))
			p.Append(radix.Cmd(&c.limits, "HGETALL", s.k.glimits))
			p.Append(radix.Cmd(&c.due, "ZRANGE", s.k.gdue, "0", "-1", "WITHSCORES"))
			return p
		})
		if err == nil {
			// (A script, so not in the pipeline: radix sends EVALSHA and
			// falls back to EVAL, which a pipeline cannot.)
			err = s.do(ctx, s.eval(groupInflightScript, &c.inflight, []string{s.k.leases, s.k.gflight, s.k.gpark, s.k.lanes[0]}))
		}
		if err != nil {
			return fmt.Errorf("prioq: groups of %q: %w", q.name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	byName := map[string]*GroupStats{}
	get := func(g string) *GroupStats {
		st := byName[g]
		if st == nil {
			st = &GroupStats{Group: g}
			byName[g] = st
		}
		return st
	}
	for _, c := range per {
		// A group lives in one shard: its figures come from that one.
		for g, v := range c.ready {
			if g != "" { // "": the markers in lanes (Stats)
				get(g).Ready, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		for j := 0; j+1 < len(c.inflight); j += 2 {
			get(c.inflight[j]).InFlight, _ = strconv.ParseInt(c.inflight[j+1], 10, 64)
		}
		for g := range c.park {
			get(g).Parked = true
		}
		for j := 0; j+1 < len(c.due); j += 2 {
			// (A time left by a put-back that came first is no park.)
			if st := byName[c.due[j]]; st != nil && st.Parked {
				st.RateParked = true
			}
		}
	}
	out := make([]GroupStats, 0, len(byName))
	for g, st := range byName {
		if st.Ready <= 0 && st.InFlight <= 0 && !st.Parked {
			continue
		}
		limits := per[0].limits // SetGroupLimit writes every shard alike
		v, ok := limits[g]
		if !ok {
			v = limits[""]
		}
		st.Limit, st.Rate = parseLimit(v)
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b GroupStats) int {
		if c := cmp.Compare(b.Ready+b.InFlight, a.Ready+a.InFlight); c != 0 {
			return c
		}
		return cmp.Compare(a.Group, b.Group)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out, nil
}
