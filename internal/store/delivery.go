package store

import (
	"sync/atomic"
	"time"
)

// Delivery is one message taken from a shard: its envelope's fields (with
// Attempts counting the deliveries, this one included; 0 without a lease),
// and what its lease and its way back need. The root's Message wraps one.
type Delivery struct {
	Envelope

	s     *Shard
	raw   []byte // the lane entry as taken, to put it back (PutBack)
	lane  int    // its lane (AtMostOnce)
	token string // lease token (AtLeastOnce)
	// deadline is the lease deadline on this host's clock (AtLeastOnce);
	// atomic: a handler's Extend and Run's renewer both move it.
	deadline atomic.Pointer[time.Time]
}

// newDelivery is the delivery of envelope e, taken from shard s.
func newDelivery(e Envelope, s *Shard) *Delivery { return &Delivery{Envelope: e, s: s} }

// Shard is where it was taken from.
func (d *Delivery) Shard() *Shard { return d.s }

// Token is its lease token ("" without a lease). It starts with the take's
// server time, in microseconds, as 13 hex digits (take.lua).
func (d *Delivery) Token() string { return d.token }

// Deadline is when its lease ends, on this host's clock (zero without a
// lease): no later than the lease in Redis (see Take).
func (d *Delivery) Deadline() time.Time {
	if t := d.deadline.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// SetDeadline records a lease moved by Extend or Run's renewer.
func (d *Delivery) SetDeadline(t time.Time) { d.deadline.Store(&t) }

// Raw is the lane entry as taken; Lane its lane.
func (d *Delivery) Raw() []byte { return d.raw }
func (d *Delivery) Lane() int   { return d.lane }

// Req is what an ack of the delivery needs.
func (d *Delivery) Req() AckReq {
	return AckReq{Token: d.token, ID: d.ID, Caller: d.CallerID, Group: d.Group}
}

// Info describes a stored message (Peek, dead letters): the root's
// MessageInfo, field for field (it converts one into the other).
type Info struct {
	ID         string
	Priority   int64
	Payload    []byte
	Attempts   int
	EnqueuedAt time.Time
	Headers    map[string]string
	Group      string
}

// InfoOf is the Info of envelope e.
func InfoOf(e Envelope) Info {
	return Info{ID: e.ID, Priority: e.Priority, Payload: e.Payload,
		Attempts: int(e.Attempts), EnqueuedAt: time.UnixMilli(e.EnqueuedMs), Headers: e.Headers, Group: e.Group}
}
