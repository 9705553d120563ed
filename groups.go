package prioq

import (
	"context"
	"fmt"

	"github.com/prioq/prioq/internal/store"
)

// Groups share a queue fairly among the tenants (or any other keys) that use
// it. A message enqueued with Group(key) waits in its group's list beside its
// lane (internal/store/keys.go), and the lane holds one marker of the group in its place:
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

// Group puts the message in group key (a tenant, a customer): see the
// package's groups. Needs an AtLeastOnce queue of Levels or Range layout
// (ErrWrongMode, ErrInvalidOption otherwise). In a queue of several shards
// the group decides the shard (with OrderingKey, or with ID, too:
// ErrInvalidOption; see ID).
func Group(key string) Option {
	return func(o *sendOptions) {
		if err := store.ValidateGroup(key); err != nil {
			o.err = err
		}
		o.group = key
	}
}

// checkGroup says whether the queue can hold messages of a group.
func (q *Queue) checkGroup(o *sendOptions) error {
	switch {
	case q.cfg.Mode != AtLeastOnce:
		return fmt.Errorf("%w: groups need AtLeastOnce (their limits count leases)", ErrWrongMode)
	case q.layout().SeqMembers():
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
		if err := store.ValidateGroup(group); err != nil {
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
	if q.layout().SeqMembers() {
		// No message of a group can be stored there (checkGroup): a limit
		// would be a key that nothing reads.
		return fmt.Errorf("%w: set group limit of %q: groups need lists: Levels or Range, not RangeSorted", ErrInvalidOption, q.name)
	}
	return q.eachShard(func(_ int, s *store.Shard) error {
		if err := s.SetGroupLimit(ctx, group, l.Concurrency, store.Rate(l.Rate)); err != nil {
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
// groups that may have messages in flight (internal/store/keys.go gflight), never a
// message: O(groups + their messages in flight), two round trips per shard.
func (q *Queue) Groups(ctx context.Context, n int) ([]GroupStats, error) {
	per := make([]store.GroupCounts, len(q.shards))
	err := q.eachShard(func(i int, s *store.Shard) (err error) {
		if per[i], err = s.GroupCounts(ctx); err != nil {
			return fmt.Errorf("prioq: groups of %q: %w", q.name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	merged := store.MergeGroups(per, n)
	out := make([]GroupStats, len(merged))
	for i, g := range merged {
		out[i] = GroupStats{Group: g.Group, Ready: g.Ready, InFlight: g.InFlight, Parked: g.Parked,
			RateParked: g.RateParked, Limit: g.Limit, Rate: Rate(g.Rate)}
	}
	return out, nil
}
