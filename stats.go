package prioq

import (
	"context"
	"time"

	"github.com/prioq/prioq/internal/store"
)

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
	// GroupsParked is how many of them wait at a limit (their concurrency
	// or rate, SetGroupLimit): skipped by takes, their messages counted in
	// Ready but in no lane.
	GroupsParked int64
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
	// segment, a lower bound of the true oldest. Messages in groups count
	// by the heads of their groups' lists: a group whose marker heads a lane
	// (Levels), and every group parked at a limit (256 groups' lists at most,
	// then a lower bound), so a tenant starved by its limit shows its age.
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

	// Retried, DeadLettered and Expired are the failures' totals since the
	// queue began (AtLeastOnce), for rates as Enqueued and Acked: deliveries
	// that failed and were scheduled again (Retry, an error of Run's
	// handler), messages moved to the dead letters (MaxAttempts reached, or
	// by the sweep), and leases that ended unacked (their messages delivered
	// again by the sweep: a consumer that died or was too slow). The failure
	// rate over an interval is (ΔRetried + ΔDeadLettered) / (ΔAcked +
	// ΔRetried + ΔDeadLettered). Each is counted just after what it counts,
	// in a call of its own: one lost with its process is not counted.
	Retried      int64
	DeadLettered int64
	Expired      int64

	// Cancelled counts the messages in flight Queue.Cancel ended since the
	// queue began (AtLeastOnce), counted in the same atomic step as the
	// cancel; waiting messages it removed are not counted.
	Cancelled int64

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
		st, err := q.shards[0].Stats(ctx)
		return statsOf(st), err
	}
	per := make([]ShardStats, len(q.shards))
	slots, nodes := q.ShardSlots(), q.ShardNodes()
	err := q.eachShard(func(i int, s *store.Shard) error {
		st, err := s.Stats(ctx)
		per[i].Stats = statsOf(st)
		per[i].Slot, per[i].Node = slots[i], nodes[i]
		return err
	})
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Lanes: make([]int64, q.layout().Lanes()), Shards: per}
	for _, p := range per {
		for i, n := range p.Lanes {
			st.Lanes[i] += n
		}
		st.Ready += p.Ready
		st.Groups += p.Groups
		st.GroupsParked += p.GroupsParked
		st.Delayed += p.Delayed
		st.InFlight += p.InFlight
		st.Dead += p.Dead
		st.Enqueued += p.Enqueued
		st.Acked += p.Acked
		st.Retried += p.Retried
		st.DeadLettered += p.DeadLettered
		st.Expired += p.Expired
		st.Cancelled += p.Cancelled
		st.OldestReady = max(st.OldestReady, p.OldestReady)
		st.Paused = st.Paused || p.Paused
	}
	return st, nil
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

// statsOf is the Stats of one shard's figures.
func statsOf(s store.Stats) Stats {
	return Stats{Lanes: s.Lanes, Ready: s.Ready, Groups: s.Groups, GroupsParked: s.Parked, Delayed: s.Delayed, InFlight: s.InFlight,
		Dead: s.Dead, OldestReady: s.OldestReady, Paused: s.Paused, Enqueued: s.Enqueued, Acked: s.Acked,
		Retried: s.Retried, DeadLettered: s.DeadLetters, Expired: s.Expired, Cancelled: s.Cancelled}
}
