package prioq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// Message is one delivered message: its handle for Ack, Retry and Extend.
// Peek and DeadLetters describe messages they do not deliver with
// MessageInfo, which has none of these.
type Message struct {
	// ID is the message's id: generated, or given with the ID option.
	ID string

	// Priority is the priority it was enqueued with.
	Priority int64

	// Payload is the message body.
	Payload []byte

	// Attempts counts deliveries including this one (AtLeastOnce); 0 for
	// AtMostOnce messages.
	Attempts int

	// EnqueuedAt is when the producer enqueued it (the producer host's clock, ms).
	EnqueuedAt time.Time

	// Headers are the headers it was enqueued with (nil without any).
	Headers map[string]string

	callerID bool
	q        *Queue
	raw      []byte // the lane entry as taken, to put it back on Close
	lane     int
	token    string    // lease token (AtLeastOnce)
	deadline time.Time // lease deadline (AtLeastOnce)
	// onExtend, set by Run, moves the handler's context deadline with the
	// lease; false when Run has already ended that context (see Extend).
	onExtend func(time.Time) bool
	// finished is the Outcome of an Ack, Retry or dead-lettering that
	// happened (0: none yet): Run does not finish a delivery twice.
	finished atomic.Int32
	// afterFinish are the AfterFinish callbacks, called by Run.
	afterFinish []func(Outcome, error)
}

// MessageInfo describes a stored message without delivering it: what Peek
// and DeadLetters return. It cannot be acknowledged; to act on a waiting
// message use Cancel, on a dead one RequeueDead or PurgeDead.
type MessageInfo struct {
	// ID is the message's id.
	ID string

	// Priority is the priority it was enqueued with.
	Priority int64

	// Payload is the message body.
	Payload []byte

	// Attempts counts the deliveries it had so far: 0 for a message that was
	// never delivered (and for every AtMostOnce message).
	Attempts int

	// EnqueuedAt is when the producer enqueued it (the producer host's clock, ms).
	EnqueuedAt time.Time

	// Headers are the headers it was enqueued with (nil without any).
	Headers map[string]string
}

func newInfo(e envelope) MessageInfo {
	return MessageInfo{ID: e.ID, Priority: e.Priority, Payload: e.Payload,
		Attempts: int(e.Attempts), EnqueuedAt: time.UnixMilli(e.EnqueuedMs), Headers: e.Headers}
}

func newMessage(e envelope) *Message {
	return &Message{
		ID:         e.ID,
		Priority:   e.Priority,
		Payload:    e.Payload,
		Attempts:   int(e.Attempts),
		EnqueuedAt: time.UnixMilli(e.EnqueuedMs),
		Headers:    e.Headers,
		callerID:   e.CallerID,
	}
}

// LeaseDeadline is when this delivery's lease ends (AtLeastOnce), on this
// host's clock: the lease in Redis ends no earlier (it runs from the server's
// now when the take ran, after this deadline's start); after it the message
// may be delivered to another consumer. Zero for AtMostOnce messages.
func (m *Message) LeaseDeadline() time.Time { return m.deadline }

// Queue is the name of the queue the message was delivered from ("" for a
// Message not delivered by a Consumer).
func (m *Message) Queue() string {
	if m.q == nil {
		return ""
	}
	return m.q.name
}

// LastAttempt reports whether a failure of this delivery sends the message
// to the dead letters (AtLeastOnce: it has had Config.MaxAttempts
// deliveries). Middleware uses it to count dead letters.
func (m *Message) LastAttempt() bool {
	return m.q != nil && m.token != "" && m.Attempts >= m.q.cfg.MaxAttempts
}

func (m *Message) leased() error {
	if m.q == nil || m.token == "" {
		return fmt.Errorf("prioq: message %q: %w", m.ID, ErrWrongMode)
	}
	return nil
}

// Ack marks the message done and deletes it: one round trip, two commands,
// shared with the other acks of its queue in flight at the same time. Acking
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
	if Outcome(m.finished.Load()) == OutcomeAcked {
		return nil // acked already: nothing to do, no round trip
	}
	acks := m.q.acks
	if m.callerID {
		acks = m.q.idAcks
	}
	err := acks.do(ctx, m, func(err error) error { return fmt.Errorf("prioq: ack %q: %w", m.ID, err) })
	if err == nil || errors.Is(err, ErrNotReplicated) {
		m.finished.CompareAndSwap(0, int32(OutcomeAcked))
	}
	return err
}

// Bounds of one merged ack call (two commands per message in a pipeline).
const maxMergedAcks = 256

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
		after = m.q.cfg.Backoff(m.Attempts)
	}
	return m.q.fail(ctx, m, after, reason, failRetry)
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
	var ok int
	err := m.q.do(ctx, extendScript.Cmd(&ok, []string{m.q.k.leases}, m.token, fmtInt(leaseMs(d))))
	if err != nil {
		return fmt.Errorf("prioq: extend %q: %w", m.ID, err)
	}
	if ok == 0 {
		return fmt.Errorf("prioq: extend %q: %w", m.ID, ErrLeaseLost)
	}
	if m.onExtend != nil && !m.onExtend(deadline) {
		return fmt.Errorf("prioq: extend %q: %w: the lease ran out (and the handler's context ended) while extending", m.ID, ErrLeaseExpired)
	}
	m.deadline = deadline
	return nil
}

// AckBatch acknowledges many messages of one queue in one round trip and
// returns one error per message (nil, ErrLeaseLost, ErrNotReplicated, or the
// Redis error). As with Ack, a message acked before (by Ack or AckBatch) is
// not acked again and gets nil. Cancelling ctx abandons the call: every ack
// then reports the ctx error, and each may or may not have happened.
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
		if m.q != msgs[0].q {
			return fill(errs, fmt.Errorf("%w: AckBatch over several queues", ErrInvalidOption))
		}
		if Outcome(m.finished.Load()) != OutcomeAcked {
			todo, at = append(todo, m), append(at, i)
		}
	}
	switch len(todo) {
	case 0:
	case 1:
		errs[at[0]] = todo[0].Ack(ctx)
	default:
		for i, err := range msgs[0].q.ack(ctx, todo) {
			if err == nil || errors.Is(err, ErrNotReplicated) {
				todo[i].finished.CompareAndSwap(0, int32(OutcomeAcked))
			}
			errs[at[i]] = err
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

// ack ends each message's lease in one round trip. For generated ids it is a
// pipeline of ZREM + HDEL per message, no Lua: the ZREM reply is the fence (1
// only while this delivery's lease token is current; an expired lease was
// re-leased under a new token, so the HDEL of an old token never touches the
// new delivery). Each message's outcome is its own ZREM's: an error reply of
// another command (the HINCRBY of the total refused at maxmemory, an HDEL on
// a wrong-typed record hash, which then holds no record) is not its error.
// Caller ids must be released only when the ack wins, which needs the ZREM's
// answer first, so batches holding one go through ack.lua (Ack merges them
// apart from the others: see Queue.idAcks).
func (q *Queue) ack(ctx context.Context, msgs []*Message) []error {
	removed := make([]int, len(msgs))
	var act radix.Action
	if hasCallerID(msgs) {
		args := make([]string, 0, 2*len(msgs))
		for _, m := range msgs {
			id := ""
			if m.callerID {
				id = m.ID
			}
			args = append(args, m.token, id)
		}
		// The script's reply replaces removed whole; it counts its acks itself.
		act = ackScript.Cmd(&removed, []string{q.k.leases, q.k.inflight, q.k.ids, q.k.counts}, args...)
	} else {
		p := radix.NewPipeline()
		for i, m := range msgs {
			removed[i] = -1 // no reply yet
			p.Append(radix.Cmd(&removed[i], "ZREM", q.k.leases, m.token))
			p.Append(radix.Cmd(nil, "HDEL", q.k.inflight, m.token))
		}
		// The total for rates (Stats.Acked): a pipeline cannot make it depend
		// on the ZREMs, so an ack that lost its lease counts too (rare: rates,
		// not accounts).
		p.Append(radix.Cmd(nil, "HINCRBY", q.k.counts, countAcked, strconv.Itoa(len(msgs))))
		act = p
	}
	werr, notRepl := q.writeWait(ctx, act)
	errs := make([]error, len(msgs))
	if werr != nil && (!isReply(werr) || hasCallerID(msgs)) {
		return fill(errs, fmt.Errorf("prioq: ack in %q: %w", q.name, werr))
	}
	if len(removed) != len(msgs) {
		return fill(errs, fmt.Errorf("prioq: ack in %q: %w", q.name, ErrScript))
	}
	for i, m := range msgs {
		switch {
		case removed[i] < 0: // its ZREM failed (a wrong-typed leases key)
			errs[i] = fmt.Errorf("prioq: ack %q: %w", m.ID, werr)
		case removed[i] == 0:
			errs[i] = fmt.Errorf("prioq: ack %q: %w", m.ID, ErrLeaseLost)
		case notRepl != nil:
			errs[i] = fmt.Errorf("prioq: ack %q: %w", m.ID, notRepl)
		}
	}
	return errs
}

func hasCallerID(msgs []*Message) bool {
	for _, m := range msgs {
		if m.callerID {
			return true
		}
	}
	return false
}

// BackoffFunc returns how long to wait before the next attempt of a message
// that has had `attempts` deliveries (1 after the first failure).
type BackoffFunc func(attempts int) time.Duration

// ExponentialBackoff doubles from base per attempt up to maxDelay, with "full
// jitter" in the upper half ([d/2, d)), so retries of many messages failing
// together spread out instead of arriving in waves. Any base and maxDelay are
// safe: the doubling stops at maxDelay without overflowing, and a negative
// value counts as 0.
func ExponentialBackoff(base, maxDelay time.Duration) BackoffFunc {
	base, maxDelay = max(base, 0), max(maxDelay, 0)
	return func(attempts int) time.Duration {
		d := min(base, maxDelay)
		for i := 1; i < attempts && d > 0 && d < maxDelay; i++ {
			if d > maxDelay/2 {
				d = maxDelay
			} else {
				d *= 2
			}
		}
		if d <= 1 {
			return d
		}
		return d/2 + rand.N(d/2)
	}
}
