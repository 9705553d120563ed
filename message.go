package prioq

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// Message is one delivered message: what MessageInfo says of it, and its
// handle for Ack, Retry and Extend (lease.go). Peek and DeadLetters describe
// messages they do not deliver with MessageInfo alone.
type Message struct {
	MessageInfo

	// d is the delivery: where it was taken from, its lease token and
	// deadline (AtLeastOnce), its lane entry as taken (to put it back on
	// Close). nil: not delivered by a Consumer.
	d *store.Delivery
	// onExtend, set by Run, moves the handler's context deadline with the
	// lease; false when Run has already ended that context (see Extend).
	onExtend func(time.Time) bool
	// finished is the Outcome of an Ack, Retry or dead-lettering that
	// happened (0: none yet): Run does not finish a delivery twice.
	finished atomic.Int32
	// ackErr carries AckBatch's result for the message across its goroutines.
	ackErr error
	// afterFinish are the AfterFinish callbacks, called by Run.
	afterFinish []func(Outcome, error)
	// result is what SetResult gave (hasResult), written by the ack
	// (retain.go); progressed: Progress recorded something.
	result     []byte
	hasResult  bool
	progressed atomic.Bool
	// riding is the outcome of an ack of it riding on a take
	// (AckAndReceive), once one was sent: Ack waits for it.
	riding atomic.Pointer[rideOutcome]
}

// MessageInfo describes a stored message without delivering it: what Peek
// and DeadLetters return. It cannot be acknowledged; to act on a waiting
// message use Cancel, on a dead one RequeueDead or PurgeDead.
type MessageInfo struct {
	// ID is the message's id: generated, or given with the ID option.
	ID string

	// Priority is the priority it was enqueued with.
	Priority int64

	// Payload is the message body.
	Payload []byte

	// Attempts counts the deliveries it has had: for a delivered Message,
	// this one included; 0 for a message never delivered, and for every
	// AtMostOnce message.
	Attempts int

	// EnqueuedAt is when the producer enqueued it (the producer host's clock, ms).
	EnqueuedAt time.Time

	// Headers are the headers it was enqueued with (nil without any).
	Headers map[string]string

	// Group is the group it was enqueued in (Group; "" for none).
	Group string
}

// newMessage is the message of delivery d.
func newMessage(d *store.Delivery) *Message {
	return &Message{MessageInfo: MessageInfo(store.InfoOf(d.Envelope)), d: d}
}

// messagesOf are the messages of deliveries ds.
func messagesOf(ds []*store.Delivery) []*Message {
	if len(ds) == 0 {
		return nil
	}
	out := make([]*Message, len(ds))
	for i, d := range ds {
		out[i] = newMessage(d)
	}
	return out
}

// deliveriesOf are the deliveries of msgs.
func deliveriesOf(msgs []*Message) []*store.Delivery {
	out := make([]*store.Delivery, len(msgs))
	for i, m := range msgs {
		out[i] = m.d
	}
	return out
}

// shard is where the message was taken from (nil: not delivered by a
// Consumer).
func (m *Message) shard() *store.Shard {
	if m.d == nil {
		return nil
	}
	return m.d.Shard()
}

// token is its lease token ("" without a lease).
func (m *Message) token() string {
	if m.d == nil {
		return ""
	}
	return m.d.Token()
}

// LeaseDeadline is when this delivery's lease ends (AtLeastOnce), on this
// host's clock: the lease in Redis ends no earlier (it runs from the server's
// now when the take ran, after this deadline's start); after it the message
// may be delivered to another consumer. Zero for AtMostOnce messages.
func (m *Message) LeaseDeadline() time.Time {
	if m.d == nil {
		return time.Time{}
	}
	return m.d.Deadline()
}

// TakenAt is when this delivery's take ran, on the Redis server's clock (its
// lease token starts with it, in microseconds): the time rate limits count
// (rates.go). The zero Time without a lease (AtMostOnce).
func (m *Message) TakenAt() time.Time { return store.TokenTime(m.token()) }

// Queue is the name of the queue the message was delivered from ("" for a
// Message not delivered by a Consumer).
func (m *Message) Queue() string {
	if m.shard() == nil {
		return ""
	}
	return m.shard().Name()
}

// LastAttempt reports whether a failure of this delivery sends the message
// to the dead letters (AtLeastOnce: it has had Config.MaxAttempts
// deliveries). Middleware uses it to count dead letters.
func (m *Message) LastAttempt() bool {
	return m.token() != "" && m.Attempts >= m.shard().Config().MaxAttempts
}

// Outcome is how Run finished one delivery; AfterFinish callbacks get it.
type Outcome int32

const (
	// OutcomeAcked: the handler returned nil and the message was acked
	// (AtMostOnce: the handler returned nil).
	OutcomeAcked Outcome = iota + 1
	// OutcomeRetried: the handler failed and the message will be delivered
	// again after its backoff.
	OutcomeRetried
	// OutcomeDeadLettered: the handler failed for the last time (or with
	// ErrSkipRetry) and the message went to the dead letters.
	OutcomeDeadLettered
	// OutcomeFailed: AtMostOnce only: the handler failed and the message is
	// gone.
	OutcomeFailed
	// OutcomeUnfinished: AtLeastOnce: the ack, retry or dead-lettering did
	// not happen (the lease was lost, Redis did not answer in time); the
	// message is delivered again once its lease runs out.
	OutcomeUnfinished
	// OutcomeCancelled: AtLeastOnce: Queue.Cancel ended the delivery while
	// the handler ran (its context's cause is ErrCancelled); the message is
	// gone, not retried, and Run neither acks nor retries it.
	OutcomeCancelled
)

// String returns the outcome as metrics label it: "acked", "retried",
// "dead_lettered", "failed", "unfinished" or "cancelled".
func (o Outcome) String() string {
	switch o {
	case OutcomeAcked:
		return "acked"
	case OutcomeRetried:
		return "retried"
	case OutcomeDeadLettered:
		return "dead_lettered"
	case OutcomeFailed:
		return "failed"
	case OutcomeUnfinished:
		return "unfinished"
	case OutcomeCancelled:
		return "cancelled"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// AfterFinish registers f to be called by Run once this delivery is finished:
// after the handler returned and its ack, retry or dead-lettering was made or
// failed. f gets the outcome and an error: the handler's for OutcomeRetried,
// OutcomeDeadLettered and OutcomeFailed; the failed call's for
// OutcomeUnfinished; ErrCancelled for OutcomeCancelled; for OutcomeAcked nil, or an error wrapping
// ErrNotReplicated when Run's ack was made but not confirmed by enough
// replicas (a handler that acked itself saw that error from its own Ack).
// Middleware uses it to count what really happened: the outermost
// middleware's return value decides what Run does, so no middleware can see
// the result from inside. Callbacks run in Run's goroutine for the message,
// in the order registered; call AfterFinish only from the handler's
// goroutine. Messages not handled by Run (Receive) never call them.
func (m *Message) AfterFinish(f func(Outcome, error)) {
	m.afterFinish = append(m.afterFinish, f)
}
