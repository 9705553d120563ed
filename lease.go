package prioq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// lease.go: how a delivery's lease ends or moves. Ack (done), Retry (again
// later, or the dead letters), Extend (more time); the Redis half of each is
// internal/store's lease.go.

func (m *Message) leased() error {
	if m.d == nil || m.d.Token() == "" {
		return fmt.Errorf("prioq: message %q: %w", m.ID, ErrWrongMode)
	}
	return nil
}

// Ack marks the message done and deletes it: one round trip, two commands,
// shared with the other acks of its queue in flight at the same time; a
// message given a result (SetResult), or of a queue with Config.Retain, is
// acked alone by one script that writes its record in the same step. Acking
// a message again after an Ack that succeeded returns nil at once, so a Run
// handler may Ack itself and then return nil.
// It fails with ErrLeaseLost, changing nothing, when the lease expired and the
// message was taken back; the work may then be done twice (at-least-once).
// With Config.WaitReplicas, ErrNotReplicated means the ack was made but not
// confirmed by enough replicas. Cancelling ctx abandons the call: the ack may
// or may not have happened.
func (m *Message) Ack(ctx context.Context) error {
	if err := m.leased(); err != nil {
		return err
	}
	if err := m.waitRide(ctx); err != nil {
		return err
	}
	if Outcome(m.finished.Load()) == OutcomeAcked {
		return nil // acked already: nothing to do, no round trip
	}
	var err error
	if m.keepsRecord() {
		err = m.ackKeeping(ctx) // fenced with its record (retain.go)
	} else {
		err = m.d.Shard().Ack(ctx, m.d.Req())
	}
	if m.ackedIf(err) {
		if !m.keepsRecord() {
			m.dropProgress(ctx)
		}
	}
	return err
}

// ackedIf records that an ack of m was made when its outcome err says so
// (nil, or ErrNotReplicated: made, not confirmed), and reports whether it
// did: Ack, Run and AckBatch then leave m alone.
func (m *Message) ackedIf(err error) bool {
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return false
	}
	m.finished.CompareAndSwap(0, int32(OutcomeAcked))
	return true
}

// waitRide waits for the outcome of an ack of m riding on a take
// (AckAndReceive whose ctx ended first), so that an Ack after it does not
// send a second ack, which would find the lease gone and say ErrLeaseLost.
func (m *Message) waitRide(ctx context.Context) error {
	ro := m.riding.Load()
	if ro == nil {
		return nil
	}
	select {
	case <-ro.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("prioq: ack %q: %w", m.ID, ctx.Err())
	}
}

// Retry gives the message back for another attempt after `after` (0: the
// queue's Backoff for this attempt), recording reason as its last error. When
// it has had MaxAttempts deliveries it goes to the dead-letter list instead.
// ErrLeaseLost as for Ack. One round trip. Cancelling ctx abandons the call:
// the retry may or may not have happened; if not, the lease runs out and the
// message is delivered again.
func (m *Message) Retry(ctx context.Context, after time.Duration, reason string) error {
	if err := m.leased(); err != nil {
		return err
	}
	if after <= 0 {
		after = m.shard().Config().Backoff(m.Attempts)
	}
	return m.fail(ctx, after, reason, store.FailRetry)
}

// Extend moves the lease deadline to d from now (the Redis server's now), d at
// least MinDuration; under Run, the handler's context then ends at the new
// deadline too. ErrLeaseLost as for Ack. One round trip. Cancelling ctx
// abandons the call: the lease may or may not have moved, and LeaseDeadline
// keeps the old deadline.
//
// Under Run, once the handler's context has ended because the lease ran out
// (context.Cause is ErrLeaseExpired), Extend fails with ErrLeaseExpired: that
// context cannot come back to life, so the handler should stop and return.
// (If the lease ended while Extend was in flight, the lease in Redis may
// have moved all the same; Run's ack or retry after the handler returns
// ends it.)
func (m *Message) Extend(ctx context.Context, d time.Duration) error {
	if err := m.leased(); err != nil {
		return err
	}
	if d < MinDuration {
		return fmt.Errorf("%w: Extend(%v): below MinDuration (%v)", ErrInvalidOption, d, MinDuration)
	}
	if m.onExtend != nil && !m.onExtend(time.Time{}) {
		return fmt.Errorf("prioq: extend %q: %w: the handler's context has ended", m.ID, ErrLeaseExpired)
	}
	deadline := time.Now().Add(d) // no later than the server's: see take
	ok, err := m.d.Shard().Extend(ctx, m.d.Token(), d)
	if err != nil {
		return fmt.Errorf("prioq: extend %q: %w", m.ID, err)
	}
	if !ok {
		return fmt.Errorf("prioq: extend %q: %w", m.ID, ErrLeaseLost)
	}
	if m.onExtend == nil {
		m.d.SetDeadline(deadline)
	} else if !m.onExtend(deadline) { // it moves the deadline
		return fmt.Errorf("prioq: extend %q: %w: the lease ran out (and the handler's context ended) while extending", m.ID, ErrLeaseExpired)
	}
	return nil
}

// AckBatch acknowledges many messages of one queue in one round trip (per
// shard they came from, the shards at once) and returns one error per
// message (nil, ErrLeaseLost, ErrNotReplicated, or the Redis error). As with
// Ack, a message acked before (by Ack or AckBatch) is not acked again and
// gets nil. Cancelling ctx abandons the call: every ack then reports the ctx
// error, and each may or may not have happened.
func AckBatch(ctx context.Context, msgs ...*Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	var todo []*Message
	var at []int // todo[i] is msgs[at[i]]
	for i, m := range msgs {
		if err := m.leased(); err != nil {
			return fill(errs, err)
		}
		if m.shard().Config() != msgs[0].shard().Config() { // shards of one queue share its config
			return fill(errs, fmt.Errorf("%w: AckBatch over several queues", ErrInvalidOption))
		}
		if err := m.waitRide(ctx); err != nil {
			errs[i] = err
			continue
		}
		if Outcome(m.finished.Load()) != OutcomeAcked {
			todo, at = append(todo, m), append(at, i)
		}
	}
	if slices.ContainsFunc(todo, (*Message).alone) {
		// A record to write or a progress to drop: those go each alone
		// (retain.go), the others merged as below.
		var rest []*Message
		var restAt []int
		for i, m := range todo {
			if m.alone() {
				errs[at[i]] = m.Ack(ctx)
			} else {
				rest, restAt = append(rest, m), append(restAt, at[i])
			}
		}
		todo, at = rest, restAt
	}
	switch len(todo) {
	case 0:
	case 1:
		errs[at[0]] = todo[0].Ack(ctx)
	default:
		var wg sync.WaitGroup
		for s, group := range byShard(todo) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reqs := make([]store.AckReq, len(group))
				for i, m := range group {
					reqs[i] = m.d.Req()
				}
				for i, err := range s.AckBatch(ctx, reqs) {
					group[i].ackedIf(err)
					group[i].ackErr = err
				}
			}()
		}
		wg.Wait()
		for i, m := range todo {
			errs[at[i]], m.ackErr = m.ackErr, nil
		}
	}
	return errs
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// fail ends m's delivery with fail.lua's op (store.FailRetry or
// store.FailDead) and, when it happened, records how on m.
func (m *Message) fail(ctx context.Context, after time.Duration, reason, op string) error {
	code, err := m.d.Shard().Fail(ctx, m.d.Token(), after, reason, op)
	switch {
	case code == store.FailCodeDead:
		m.finished.CompareAndSwap(0, int32(OutcomeDeadLettered))
		m.keepDead(ctx, reason)
	case code == store.FailCodeRequeued:
		m.finished.CompareAndSwap(0, int32(OutcomeRetried))
	}
	if code != store.FailCodeLost {
		m.dropProgress(ctx)
	}
	if err != nil {
		return fmt.Errorf("prioq: %s %q: %w", op, m.ID, err)
	}
	return nil
}

// byShard groups messages by the shard they came from, keeping their order.
func byShard(msgs []*Message) map[*store.Shard][]*Message {
	out := make(map[*store.Shard][]*Message, 1)
	for _, m := range msgs {
		out[m.shard()] = append(out[m.shard()], m)
	}
	return out
}
