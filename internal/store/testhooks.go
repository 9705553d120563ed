package store

import (
	"context"
	"time"
)

// What tests of the layers above need of the store's internals, and nothing
// else uses.

// SetIDCounter sets the process-wide counter of generated ids, so that a
// test can make the next ids wrap (from 65,535 to 0).
func SetIDCounter(n uint32) { idCounter.Store(n) }

// KeysOf is the key set of queue name of one shard with lanes lanes, for
// tests that write keys as an earlier version did.
func KeysOf(name string, lanes int) *KeySet {
	k := newKeySet(name, lanes)
	return &k
}

// Merger names one of a shard's merged calls (coalesce.go).
type Merger int

const (
	MergedEnqueues Merger = iota // single plain enqueues
	MergedAcks                   // acks of generated ids
	MergedTakes                  // takes of one lease
)

// MergerState reports whether a merged call of kind m (MergedTakes: of
// takes of lease) is in flight, and how many callers wait behind it: for
// tests that must know a call is held before they queue more.
func (s *Shard) MergerState(m Merger, lease time.Duration) (busy bool, queued int) {
	switch m {
	case MergedEnqueues:
		return s.plain.state()
	case MergedAcks:
		return s.acks.state()
	}
	s.takes.mu.Lock()
	c := s.takes.byLease[lease]
	s.takes.mu.Unlock()
	if c == nil {
		return false, 0
	}
	return c.state()
}

func (c *coalescer[T, R]) state() (busy bool, queued int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.busy, len(c.pending)
}

// AbandonGrace is how long a call still waits for a reply after its ctx
// ended (see abandonGrace).
const AbandonGrace = abandonGrace

// FireDue fires the schedules due now (server clock) alone, without the
// promotion around it (Promote): for tests of schedfire.lua.
func (s *Shard) FireDue(ctx context.Context) error {
	now, err := s.serverNow(ctx)
	if err != nil {
		return err
	}
	return s.fireDue(ctx, now)
}
