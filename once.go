package prioq

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// once.go: the options that keep work from running twice, UniqueFor,
// UniqueKey, Debounce and DebounceFirst (docs/once.md), which enqueue.lua
// applies in the enqueue's atomic step (lua/inc/once.lua), and those that
// keep it from running late, StartBy and MaxWait (internal/store
// startby.go).

// Bounds of the windows of UniqueFor, UniqueKey, Debounce and DebounceFirst,
// and of their keys' length.
const (
	MinOnceWindow = time.Millisecond
	MaxOnceWindow = 366 * 24 * time.Hour
	MaxOnceKey    = 512
)

// UniqueFor refuses, with ErrDuplicate and nothing written, every enqueue of
// the message's ID within d after this one was stored, even once it was
// handled and its id is free again: a window on the Redis server's clock
// that opens when the first is stored and ends d later (an enqueue exactly
// d after is stored). Needs ID. A refused enqueue does not move the window.
// The window's key (prioq:{Q}:uniq:<id>) expires by itself at its end: the
// memory is one small key per id in its window. d from MinOnceWindow to
// MaxOnceWindow, whole milliseconds (rounded up).
func UniqueFor(d time.Duration) Option {
	return func(o *sendOptions) {
		o.setOnce(store.Once{Window: d}, "UniqueFor")
		o.uniqueByID = true
	}
}

// UniqueKey is UniqueFor on key instead of the id: any enqueue with the same
// key within d after the first stored is refused with ErrDuplicate. On a
// queue of several shards the key chooses the message's shard (as
// OrderingKey does), so it cannot go with ID, Group or OrderingKey there
// (ErrInvalidOption).
func UniqueKey(key string, d time.Duration) Option {
	return func(o *sendOptions) { o.setOnce(store.Once{Key: key, Window: d}, "UniqueKey") }
}

// Debounce folds the enqueues with key made within d of each other into
// one message, the last one's: each enqueue is delayed d (by the server's
// clock), and replaces the message of key still waiting for its due time,
// if any (the replaced one is gone, never delivered; its id is free). Once
// key's message is due (ready, in flight, handled), the next enqueue with
// key starts a new one: at most one message of a key waits, and it may
// run beside an earlier one already delivered. Not with ID, Delay or At
// (ErrInvalidOption); on a queue of several shards the key chooses the
// shard, as UniqueKey's. d as UniqueFor's.
func Debounce(key string, d time.Duration) Option {
	return func(o *sendOptions) { o.setOnce(store.Once{Key: key, Window: d, Debounce: true}, "Debounce") }
}

// DebounceFirst is Debounce keeping the first message: an enqueue with key
// while key's message waits stores nothing and moves that message's due
// time to d from now; EnqueueResult.Folded reports it, and the id returned
// is that message's.
func DebounceFirst(key string, d time.Duration) Option {
	return func(o *sendOptions) {
		o.setOnce(store.Once{Key: key, Window: d, Debounce: true, First: true}, "DebounceFirst")
	}
}

func (o *sendOptions) setOnce(once store.Once, name string) {
	o.onces++
	switch {
	case o.onces > 1:
		o.err = fmt.Errorf("%w: more than one of UniqueFor, UniqueKey, Debounce, DebounceFirst", ErrInvalidOption)
	case once.Window < MinOnceWindow || once.Window > MaxOnceWindow:
		o.err = fmt.Errorf("%w: %s window %v (from %v to %v)", ErrInvalidOption, name, once.Window, MinOnceWindow, MaxOnceWindow)
	case name != "UniqueFor" && (once.Key == "" || len(once.Key) > MaxOnceKey):
		o.err = fmt.Errorf("%w: %s key of %d bytes (1 to %d)", ErrInvalidOption, name, len(once.Key), MaxOnceKey)
	}
	o.once = once
}

// checkOnce checks the once option against the others, and sets
// UniqueFor's key: the id.
func (o *sendOptions) checkOnce(shards int) error {
	switch {
	case o.onces == 0:
		return nil
	case o.uniqueByID && o.id == "":
		return fmt.Errorf("%w: UniqueFor needs ID (or use UniqueKey)", ErrInvalidOption)
	case o.uniqueByID:
		o.once.Key = o.id
		return nil
	case o.once.Debounce && o.id != "":
		return fmt.Errorf("%w: Debounce with ID: a debounced message's id is generated", ErrInvalidOption)
	case o.once.Debounce && (o.delay > 0 || !o.at.IsZero()):
		return fmt.Errorf("%w: Debounce with Delay or At: the debounce sets the due time", ErrInvalidOption)
	case shards > 1 && (o.id != "" || o.group != "" || o.orderingKey != ""):
		return fmt.Errorf("%w: UniqueKey or Debounce with ID, Group or OrderingKey on a queue of several shards: the key chooses the shard", ErrInvalidOption)
	}
	return nil
}

// StartByHeader is the header that carries a message's StartBy time (unix
// ms): set by StartBy and MaxWait, read by the consumers' takes. A message
// enqueued with this header set by hand behaves as with StartBy.
const StartByHeader = "prioq-start-by"

// StartBy makes a message whose first delivery is not taken by t never
// run: the take that finds it later (by the Redis server's clock: the
// take's time) moves it to the dead letters, with a reason that starts with
// "expired: not started by" (AtLeastOnce: Stats.DeadLettered counts it), or,
// AtMostOnce, drops it and reports it to OnError (wrapping ErrTooLate; this
// host's clock then). It bounds the start only: a message delivered once
// (a retry, a redelivery, a dead letter requeued by hand) is never late.
// Until a take meets it, it waits and counts as ready (or delayed). t is the
// caller's wall clock, as At's; a t not after the message's due time and
// now is refused (ErrInvalidOption), as is StartBy with DebounceFirst (a
// fold moves the due time, not the start-by time). Carried in the
// StartByHeader header.
func StartBy(t time.Time) Option {
	return func(o *sendOptions) {
		if o.hasStartBy {
			o.err = fmt.Errorf("%w: more than one StartBy or MaxWait", ErrInvalidOption)
		}
		o.startBy, o.hasStartBy = t, true
	}
}

// MaxWait is StartBy of d after the message is due: its At time, or now
// (this host's clock) plus its Delay (or Debounce window). d must be
// positive.
func MaxWait(d time.Duration) Option {
	return func(o *sendOptions) {
		if o.hasStartBy {
			o.err = fmt.Errorf("%w: more than one StartBy or MaxWait", ErrInvalidOption)
		}
		if d <= 0 {
			o.err = fmt.Errorf("%w: MaxWait(%v): must be positive", ErrInvalidOption, d)
		}
		o.maxWait, o.hasStartBy = d, true
	}
}

// setStartBy puts the StartBy time into the headers, once the due time is
// known; now is this host's clock.
func (o *sendOptions) setStartBy(now time.Time) error {
	if !o.hasStartBy {
		return nil
	}
	if o.once.Debounce && o.once.First {
		// A fold moves the kept message's due time, not the start-by time
		// its header carries: the burst would be late by its own length.
		return fmt.Errorf("%w: DebounceFirst with StartBy or MaxWait", ErrInvalidOption)
	}
	due := now.Add(o.delay)
	if !o.at.IsZero() {
		due = o.at
	}
	by := o.startBy
	if o.maxWait > 0 {
		by = due.Add(o.maxWait)
	}
	if !by.After(due) || !by.After(now) {
		return fmt.Errorf("%w: StartBy %v is not after the message is due (%v) and now (%v)", ErrInvalidOption, by, due, now)
	}
	h := make(map[string]string, len(o.headers)+1)
	for k, v := range o.headers {
		h[k] = v
	}
	h[StartByHeader] = strconv.FormatInt(by.UnixMilli(), 10)
	o.headers = h
	return store.ValidateHeaders(h) // one header more than the caller's
}
