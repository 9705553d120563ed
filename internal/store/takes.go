package store

import (
	"context"
	"time"
)

// takes.go: the take's API for the consumers (take.go holds the take
// itself: its script's arguments and reply).

// TakeArgs say what a take pops (see takeArgs).
type TakeArgs struct {
	// Lanes are lane keys in serving order (Keys().HighFirst(), or a
	// weighted order); N how many messages at most.
	Lanes []string
	N     int
	// Lease is how long the messages stay leased; 0 takes without a lease
	// (AtMostOnce).
	Lease time.Duration
	// PopLanes limits the pops to the first PopLanes lanes (0: all); Top
	// asks for the best priority left in all of them (TakeReply.Top).
	PopLanes int
	Top      bool
	// Floor, with Floored, is the lowest priority to take.
	Floor   int64
	Floored bool
	// ClaimWake removes the wake-up member first (a MultiConsumer: see
	// take.lua).
	ClaimWake bool
	// Guess: Lanes are HighFirst, all of them: try where the last such take
	// found work, or read the filled index.
	Guess bool
}

// TakeReply is what a take got.
type TakeReply struct {
	Deliveries []*Delivery
	// Paused: the queue is paused, nothing was taken.
	Paused bool
	// Top is the best priority left in the shard's lanes (HasTop false:
	// none, or not asked).
	Top    int64
	HasTop bool
	// Dropped are the AtMostOnce entries that did not decode, gone.
	Dropped []error
	// Limited: the queue is at its rate limit, and its next message may be
	// taken after this long (nothing was taken).
	Limited time.Duration
}

// Take leases up to a.N ready messages (pops them, with a.Lease 0) in one
// round trip (take.lua). The lease ends a.Lease after the server's now when
// the script runs; the deadline a delivery carries is a.Lease after this
// host's monotonic clock before the call: no later than the server's,
// whatever the host's wall clock says, so a handler's context never outlives
// its lease.
func (s *Shard) Take(ctx context.Context, a TakeArgs) (TakeReply, error) {
	ta := takeArgs{lanes: a.Lanes, n: a.N, lease: a.Lease, popLanes: a.PopLanes, top: a.Top, claimWake: a.ClaimWake, guess: a.Guess}
	if a.Floored {
		ta.floor = fmtInt(a.Floor)
	}
	r, err := s.takeFrom(ctx, ta)
	return TakeReply{Deliveries: r.msgs, Paused: r.paused, Top: r.top, HasTop: r.hasTop, Dropped: r.dropped, Limited: r.limited}, err
}

// Taken is what TakeShared got for one asker.
type Taken struct {
	Deliveries []*Delivery
	Limited    time.Duration // TakeReply's
	Dropped    []error       // TakeReply's (AtMostOnce), given to one asker only
	Err        error
	// AckErrs are the errors of the acks that rode on the take, one per
	// ack, as Ack's (nil, ErrLeaseLost, ErrNotReplicated, the call's).
	AckErrs []error
}

// TakeShared is a take of up to n messages over the queue's fixed lane order
// (HighFirst), merged with the takes of the queue's other consumers (same
// lease) in flight at the same time: one script call pops for all of them,
// each gets its own messages (see takeMerged). acks ride on it: they are
// made in the same round trip (ride.go), each with its own outcome, made
// whatever becomes of the take.
func (s *Shard) TakeShared(ctx context.Context, n int, lease time.Duration, acks []AckReq) Taken {
	r := s.takeMerged(ctx, n, lease, acks)
	return Taken{Deliveries: r.msgs, Limited: r.limited, Dropped: r.dropped, Err: r.err, AckErrs: r.ackErrs}
}

// RandomID is a random id (20 hex digits), such as a lease token's suffix: for
// a consumer's poke keys (Keys().Poke).
func RandomID() string { return leaseSuffix() }
