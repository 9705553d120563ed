package prioq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/require"
)

// Review of issue 34's unique windows, debounce and start timeouts (and
// issue 32's changes); each test here failed on the code reviewed.

// Setup: DebounceFirst(k, 1 s) with MaxWait(500 ms): the first enqueue is
// due at t+1 s and must start by t+1.5 s (its header). A second enqueue of
// k at t+700 ms folds into it and moves its due time to t+1.7 s, but the
// kept message's start-by header is still t+1.5 s. Wrong: the message can
// never be taken in time; its first take dead-letters it ("expired: not
// started by"), so a debounced burst with MaxWait runs nothing. docs/once.md
// says MaxWait is d after the message is due. Fix: a fold moves the start-by
// time with the due time (rewrite the header in once.lua's fold, or keep
// the start-by relative to the due time), or refuse DebounceFirst with
// StartBy/MaxWait.
func TestReview34_DebounceFirstFoldKeepsMaxWaitReachable(t *testing.T) {
	// The fix chosen of the two above: the combination is refused (a fold
	// cannot move the start-by time its header carries), nothing written;
	// Debounce (the last one's message) with MaxWait works, each fold
	// bringing its own start-by time.
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	for _, o := range []Option{MaxWait(500 * time.Millisecond), StartBy(time.Now().Add(time.Hour))} {
		_, err := q.Enqueue(ctx, []byte("first"), DebounceFirst("k", time.Second), o)
		require.ErrorIs(t, err, ErrInvalidOption)
	}
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), st.Enqueued, "nothing written")

	_, err = q.Enqueue(ctx, []byte("first"), Debounce("k", time.Second), MaxWait(500*time.Millisecond))
	require.NoError(t, err)
	time.Sleep(700 * time.Millisecond)
	last, err := q.Enqueue(ctx, []byte("second"), Debounce("k", time.Second), MaxWait(500*time.Millisecond))
	require.NoError(t, err)
	c := newConsumer(t, q, ConsumerConfig{})
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := c.Receive(rctx)
	require.NoError(t, err, "the debounced message is taken as soon as it is due, within its MaxWait")
	require.Equal(t, last, m.ID)
	require.NoError(t, m.Ack(ctx))
	dead, err := q.DeadLetters(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 0)
}

// Setup: Debounce(k, 100 ms): its message is promoted, taken, and its
// handler retries it in 5 s; it waits in the delayed set again, under the
// same id (fail.lua schedule), and k's debounce key (PX window + 1 s)
// still names it. A new enqueue of k 100 ms later. Wrong: debounce_pending
// finds the retrying message "pending" and deletes it (Debounce) or folds
// into it (DebounceFirst: Folded, its id, the new payload dropped), though
// it was already delivered; docs/once.md: "Once it is due (promoted: ready,
// in flight, handled, dead), the next enqueue with the key starts a new
// waiting message", the earlier one running beside it. A delivered
// message's retry is lost (Debounce). Fix: the debounce key must name a
// message that was never promoted: clear it (or compare a token kept in
// the record) when the promoter moves the message, e.g. store the
// debounce key's value as id plus the pending member (seq..id), which a
// retry's new seq does not match.
func TestReview34_DebounceLeavesARetryingMessageAlone(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	for _, first := range []bool{false, true} {
		q := openQueue(t, cl, Config{Layout: Levels(2)})
		opt := func() Option {
			if first {
				return DebounceFirst("k", 100*time.Millisecond)
			}
			return Debounce("k", 100*time.Millisecond)
		}
		a, err := q.Enqueue(ctx, []byte("a"), opt())
		require.NoError(t, err)
		c := newConsumer(t, q, ConsumerConfig{})
		m, err := c.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, a, m.ID)
		require.NoError(t, m.Retry(ctx, 5*time.Second, "try again later"))
		require.NoError(t, c.Close(ctx)) // no promoter from here: what waits stays in the delayed set

		res, err := q.EnqueueBatch(ctx, []EnqueueItem{{Payload: []byte("b"), Options: []Option{opt()}}})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.False(t, res[0].Folded, "first=%v: folded into a message already delivered", first)
		require.NotEqual(t, a, res[0].ID)
		page, err := q.Scheduled(ctx, 0, 10)
		require.NoError(t, err)
		var ids []string
		for _, s := range page {
			ids = append(ids, s.ID)
		}
		require.Contains(t, ids, a, "first=%v: the retry of the delivered message is kept", first)
		require.Len(t, page, 2)
	}
}

// Setup: a message enqueued with MaxWait is taken late and dead-lettered
// ("expired: not started by ..."); docs/once.md says to "requeue it by hand
// if it should run after all". Wrong: RequeueDead keeps its envelope, the
// prioq-start-by header with it, so the next take finds it late again and
// dead-letters it again: it can never run. Fix: RequeueDead (dead.lua's
// requeue) drops the start-by header of a message it requeues (or of one
// whose reason starts with ReasonTooLate), or the docs say to enqueue the
// payload again instead.
func TestReview34_RequeuedLateMessageRuns(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	old := q.withClock(func() time.Time { return time.Now().Add(-time.Hour) })
	late, err := old.Enqueue(ctx, []byte("late"), MaxWait(time.Minute))
	require.NoError(t, err)
	c := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = c.Receive(rctx)
	cancel()
	require.True(t, errors.Is(err, context.DeadlineExceeded), "the late one is not handed out: %v", err)
	dead, err := q.DeadLetters(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, late, dead[0].ID)

	require.NoError(t, q.RequeueDead(ctx, late))
	rctx, cancel = context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := c.Receive(rctx)
	require.NoError(t, err, "requeued by hand, it runs after all")
	require.Equal(t, late, m.ID)
	require.NoError(t, m.Ack(ctx))
}

// Setup: Debounce(k, 50 ms) on a queue whose consumers are down (or whose
// promoter is late) for more than a second: the message is past due but
// still in the delayed set. Another enqueue of k 1.2 s later. Wrong: k's
// debounce key was written PX window + 1 s, so it has expired, and the new
// enqueue stores a second message beside the first: two messages of k
// wait, both run when consumers come back. docs/once.md: "While key's
// message waits (it is in the delayed set), an enqueue with the same key
// replaces it ... At most one message per key waits". Fix: keep the
// debounce key until the message leaves the delayed set (the promoter, or
// Cancel, deletes it when it names the message; or no PX and a check of
// the delayed set, which debounce_pending already does), or say in the
// docs that a message past due by more than a second is out of the
// debounce.
func TestReview34_DebounceReplacesAnUnpromotedMessage(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	for _, first := range []bool{false, true} {
		q := openQueue(t, cl, Config{Layout: Levels(2)})
		opt := func() Option {
			if first {
				return DebounceFirst("k", 50*time.Millisecond)
			}
			return Debounce("k", 50*time.Millisecond)
		}
		_, err := q.Enqueue(ctx, []byte("a"), opt())
		require.NoError(t, err)
		time.Sleep(1200 * time.Millisecond) // nobody promotes
		_, err = q.Enqueue(ctx, []byte("b"), opt())
		require.NoError(t, err)
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Delayed, "first=%v: one message of the key waits in the delayed set", first)
	}
}

// Setup: StartBy(time.Time{}), the zero time (an unset deadline field
// passed through, a common mistake). StartBy's doc: "a t before the
// message's due time (or now) is refused (ErrInvalidOption)". Wrong: the
// zero time is taken for "no StartBy" (setStartBy tests IsZero), so the
// message is stored with no start-by time at all, and a second StartBy
// after it is not seen as "more than one". Fix: record that StartBy was
// given (a flag, as onces counts), and refuse a zero or past t.
func TestReview34_StartByZeroTimeRefused(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	_, err := q.Enqueue(ctx, []byte("x"), StartBy(time.Time{}))
	require.ErrorIs(t, err, ErrInvalidOption, "the zero time is before now")
	_, err = q.Enqueue(ctx, []byte("x"), StartBy(time.Time{}), StartBy(time.Now().Add(time.Hour)))
	require.ErrorIs(t, err, ErrInvalidOption, "two StartBy")
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), st.Enqueued, "nothing written")
}

// Setup: an EnqueueItem with Debounce(k, 1 h), asked ReadyAt(now) by an
// enqueue middleware (prioqotel's queue-time header). Wrong: ReadyAt reads
// Delay and At only; Debounce's delay is set later, in prepare, so it
// answers now, though the message is due an hour later: prioqotel then
// counts the debounce window as time spent waiting in the queue (its
// ReadyAtHeader is not set, the queue time starts at the enqueue). Fix:
// ReadyAt applies the debounce window as prepare does (o.once.Debounce:
// now + Window).
func TestReview34_ReadyAtKnowsTheDebounce(t *testing.T) {
	now := time.Now()
	for _, o := range []Option{Debounce("k", time.Hour), DebounceFirst("k", time.Hour)} {
		it := EnqueueItem{Payload: []byte("x"), Options: []Option{o}}
		require.Equal(t, now.Add(time.Hour), it.ReadyAt(now))
	}
}
