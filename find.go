package prioq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// MessageState is where a message is: what Queue.Message reports.
type MessageState int

// The states of a message.
const (
	// MessageReady: in its lane (or its group's list), waiting to be taken.
	MessageReady MessageState = iota + 1
	// MessageDelayed: waiting for its due time.
	MessageDelayed
	// MessageInFlight: taken, its lease running (AtLeastOnce).
	MessageInFlight
	// MessageDead: in the dead letters.
	MessageDead
	// MessageFinished: acked or dead-lettered, and its record retained
	// (Config.Retain, Message.SetResult): Finished holds it.
	MessageFinished
)

// String returns "ready", "delayed", "in flight", "dead" or "finished".
func (s MessageState) String() string {
	switch s {
	case MessageReady:
		return "ready"
	case MessageDelayed:
		return "delayed"
	case MessageInFlight:
		return "in flight"
	case MessageDead:
		return "dead"
	case MessageFinished:
		return "finished"
	}
	return "MessageState(" + strconv.Itoa(int(s)) + ")"
}

// MessageStatus is one message found by Queue.Message: what it is
// (MessageInfo; Attempts counts its finished deliveries) and where. The
// fields of the other states are zero.
type MessageStatus struct {
	MessageInfo

	// State is where it is.
	State MessageState

	// Shard is the shard of the queue that holds it (0 for a queue of one).
	Shard int

	// Lane is a ready message's lane: its priority in a Levels queue, its
	// segment (0 the lowest) in a Range queue.
	Lane int

	// Ahead counts the entries before a ready message in the list that
	// holds it, as it was read: its lane (Levels), its priority's list
	// (Range), or its group's list (a grouped message). An entry is a
	// message or, in a lane, another group's turn; higher lanes are not
	// counted.
	Ahead int

	// Parked reports that a ready message's group is held at its
	// concurrency or rate limit: no take serves it until the limit lets it.
	Parked bool

	// Due is when a delayed message becomes ready (the server's clock).
	Due time.Time

	// LeaseDeadline is when the lease of a message in flight ends unless it
	// is acked, retried or extended; TakenAt when its delivery was taken
	// (the server's clock).
	LeaseDeadline, TakenAt time.Time

	// LeaseToken names the delivery of a message in flight (the lease a
	// consumer holds); each delivery has its own. Holder names the process
	// that took it, as LeasedMessage.Holder.
	LeaseToken, Holder string

	// Reason and DiedAt are a dead message's last error and when it died;
	// Raw its stored bytes when they did not decode, as DeadLetter.Raw.
	Reason string
	DiedAt time.Time
	Raw    []byte

	// Progress is what the handler of a message in flight last reported
	// with Message.Progress (nil for nothing).
	Progress *Progress

	// Finished is a finished message's record (its Payload, Priority,
	// Headers and Group are not kept).
	Finished *Result
}

// Progress is what a handler reported with Message.Progress.
type Progress struct {
	Percent int
	Note    string
	At      time.Time // the server's clock
}

// Message finds the message id wherever it is: ready, delayed, in flight
// (with its Progress), dead, or finished with a retained record (looked
// for last, O(1): see Config.Retain). ErrNotFound when none has that id
// (never enqueued, or acked, cancelled, purged with no record kept). An
// invalid id is ErrInvalidID, and nothing is read. It only reads.
//
// Cost, on the shard that holds the message: a delayed one is found in
// O(1), the other states by reading them a bounded piece at a time (at
// most 500 entries a call, so Redis serves other clients between calls):
// O(ready messages), O(messages in flight) and O(dead letters), searched
// in that order after the delayed ones; every ready message is read to
// find one that is not (no index by id, which every enqueue and take would
// pay for). A queue of several shards searches the shard a generated id
// names, and for an id of the caller's every shard at once.
//
// The search is not one atomic read. It follows a message's life (ready,
// in flight, retried, dead) and reads lists from their tail, so a message
// taken, acked or retried meanwhile is found where it went or reported
// gone; one that goes back to a place already read during the search (a
// lease expired into its lane, a dead letter requeued) may be reported
// ErrNotFound: ask again. A message is never reported in two states.
// Records that do not decode, and keys of the wrong type, are passed by.
// Cancelling ctx ends the search with ctx's error.
func (q *Queue) Message(ctx context.Context, id string) (MessageStatus, error) {
	if err := store.ValidateID(id); err != nil {
		return MessageStatus{}, err
	}
	shards := q.shardsFor(id)
	found := make([]store.Found, len(shards))
	err := store.Each(shards, func(i int, s *store.Shard) (err error) {
		found[i], err = s.Find(ctx, id)
		return err
	})
	// The most likely shard first (shardsFor): one found there is the answer
	// even when another shard failed.
	for i, f := range found {
		if f.Place != store.PlaceNone {
			return statusOf(f, q.shardIndex(shards[i])), nil
		}
	}
	if err != nil {
		return MessageStatus{}, err
	}
	return MessageStatus{}, fmt.Errorf("%w: no message %q in %q", ErrNotFound, id, q.name)
}

// shardIndex is the place of s among the queue's shards.
func (q *Queue) shardIndex(s *store.Shard) int {
	for i, x := range q.shards {
		if x == s {
			return i
		}
	}
	return 0
}

// statusOf is the MessageStatus of what Find found.
func statusOf(f store.Found, shard int) MessageStatus {
	st := MessageStatus{MessageInfo: MessageInfo(f.Info), Shard: shard}
	switch f.Place {
	case store.PlaceReady:
		st.State, st.Lane, st.Ahead, st.Parked = MessageReady, f.Lane, f.Ahead, f.Parked
	case store.PlaceDelayed:
		st.State, st.Due = MessageDelayed, f.Due
	case store.PlaceInFlight:
		st.State, st.LeaseDeadline, st.TakenAt, st.LeaseToken = MessageInFlight, f.Deadline, f.TakenAt, f.Token
		st.Holder = store.LeaseHolder(f.Token)
	case store.PlaceDead:
		st.State, st.Reason, st.DiedAt, st.Raw = MessageDead, f.Reason, f.DiedAt, f.Raw
	case store.PlaceFinished:
		r := resultOf(f.ID, f.Record)
		st.State, st.Finished = MessageFinished, &r
	}
	if f.HasProgress {
		st.Progress = &Progress{Percent: f.Progress.Percent, Note: f.Progress.Note, At: f.Progress.At}
	}
	return st
}
