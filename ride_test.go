package prioq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// ride_test.go: acks that ride on takes (internal/store/ride.go, Run's
// runAck): one round trip for a consumer's acks and its next take, each with
// its own outcome.

// leasedOne takes one message of q with a lease, outside any consumer.
func leasedOne(t *testing.T, ctx context.Context, q *Queue) *Message {
	t.Helper()
	msgs, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	return msgs[0]
}

// enqueuePayloads enqueues one message per payload, with generated ids:
// their acks are pipelined commands (caller ids' go through ack.lua).
func enqueuePayloads(ctx context.Context, t *testing.T, q *Queue, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		_, err := q.Enqueue(ctx, []byte(p))
		require.NoError(t, err)
	}
}

// oneLeasedOfTwo is a queue on c holding two messages ("a", "b"), the first
// of them leased.
func oneLeasedOfTwo(t *testing.T, c radix.Client) (context.Context, *Queue, *Message) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{})
	enqueuePayloads(ctx, t, q, "a", "b")
	return ctx, q, leasedOne(t, ctx, q)
}

// rodeAndStood checks that the one ack riding on r was made.
func rodeAndStood(t *testing.T, ctx context.Context, c radix.Client, q *Queue, m *Message, r store.Taken) {
	t.Helper()
	require.Len(t, r.AckErrs, 1)
	assert.NoError(t, r.AckErrs[0], "the ack's own outcome: its lease ended")
	assert.False(t, leased(t, ctx, c, q, m))
}

// leased reports whether the lease of m's delivery is still in Redis.
func leased(t *testing.T, ctx context.Context, c radix.Client, q *Queue, m *Message) bool {
	t.Helper()
	var score radix.Maybe
	require.NoError(t, c.Do(ctx, radix.Cmd(&score, "ZSCORE", sh(q).Keys().Leases(), m.d.Token())))
	return !score.Null
}

// A take that fails with an error (its records hash of the wrong type:
// take.lua undoes its pop and raises) fails no ack riding on it: the ack is
// made and reported as made.
func TestRideAckStandsWhenItsTakeFails(t *testing.T) {
	c := newClient(t)
	ctx, q, m := oneLeasedOfTwo(t, c)
	inflight := sh(q).Keys().Inflight()
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", inflight)))
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", inflight, "not a hash")))

	r := sh(q).TakeShared(ctx, 1, time.Minute, []store.AckReq{m.d.Req()})
	require.Error(t, r.Err, "the take fails")
	assert.Empty(t, r.Deliveries)
	rodeAndStood(t, ctx, c, q, m, r)

	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", inflight)))
	r = sh(q).TakeShared(ctx, 5, time.Minute, nil)
	require.NoError(t, r.Err)
	require.Len(t, r.Deliveries, 1, "the failed take put back what it popped")
	assert.Equal(t, "b", string(r.Deliveries[0].Payload))
}

// A take of a paused queue takes nothing, and the ack riding on it is made.
func TestRideAckOnATakeOfAPausedQueue(t *testing.T) {
	c := newClient(t)
	ctx, q, m := oneLeasedOfTwo(t, c)
	require.NoError(t, q.Pause(ctx))

	r := sh(q).TakeShared(ctx, 1, time.Minute, []store.AckReq{m.d.Req()})
	require.NoError(t, r.Err)
	assert.Empty(t, r.Deliveries)
	rodeAndStood(t, ctx, c, q, m, r)
}

// An ack that lost its lease (ErrLeaseLost, as Ack's) takes nothing from the
// take it rides on: the take delivers its messages. The fence holds: the
// stale ack leaves the new delivery of the same message alone.
func TestRideLostAckKeepsTheTake(t *testing.T) {
	for _, callerIDs := range []bool{false, true} { // pipelined acks; ack.lua's, apart
		t.Run(map[bool]string{false: "generated ids", true: "caller ids"}[callerIDs], func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			c := newClient(t)
			q := openQueue(t, c, Config{})
			enqueue := func(ps ...string) {
				if callerIDs {
					enqueueIDs(ctx, t, q, ps...)
				} else {
					enqueuePayloads(ctx, t, q, ps...)
				}
			}
			enqueue("a", "b")
			m := leasedOne(t, ctx, q)
			require.NoError(t, m.Ack(ctx))
			other := leasedOne(t, ctx, q) // "b", leased under its own token
			stale := other.d.Req()
			stale.Token = stale.Token[:len(stale.Token)-1] + "x" // no such lease

			r := sh(q).TakeShared(ctx, 5, time.Minute, []store.AckReq{m.d.Req(), stale})
			require.NoError(t, r.Err)
			assert.Empty(t, r.Deliveries, "nothing left to take")
			require.Len(t, r.AckErrs, 2)
			assert.ErrorIs(t, r.AckErrs[0], ErrLeaseLost)
			assert.ErrorIs(t, r.AckErrs[1], ErrLeaseLost)
			assert.True(t, leased(t, ctx, c, q, other), "another delivery's lease is untouched")

			enqueue("c")
			r = sh(q).TakeShared(ctx, 5, time.Minute, []store.AckReq{m.d.Req(), other.d.Req()})
			require.NoError(t, r.Err)
			require.Len(t, r.Deliveries, 1, "a lost ack keeps the take's messages")
			assert.Equal(t, "c", string(r.Deliveries[0].Payload))
			require.Len(t, r.AckErrs, 2)
			assert.ErrorIs(t, r.AckErrs[0], ErrLeaseLost)
			assert.NoError(t, r.AckErrs[1])
			assert.False(t, leased(t, ctx, c, q, other))
		})
	}
}

// With the take's script gone from the server's cache, the EVALSHA in the
// pipeline gets NOSCRIPT: the acks stand, and the take goes again alone
// (radix's EVAL), delivering its message.
func TestRideTakeAfterScriptFlush(t *testing.T) {
	c := ownPool(t, ownServer(t), 4)
	ctx, q, m := oneLeasedOfTwo(t, c)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SCRIPT", "FLUSH")))

	r := sh(q).TakeShared(ctx, 1, time.Minute, []store.AckReq{m.d.Req()})
	require.NoError(t, r.Err)
	require.Len(t, r.Deliveries, 1)
	assert.Equal(t, "b", string(r.Deliveries[0].Payload))
	rodeAndStood(t, ctx, c, q, m, r)
}

// countingClient counts the calls (round trips: a pipeline is one) made on
// a client.
type countingClient struct {
	radix.Client
	n atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, a radix.Action) error {
	c.n.Add(1)
	return c.Client.Do(ctx, a)
}

// Run with one handler: each message's ack rides on the take of the next,
// so a message costs one round trip, not two (a take, then an ack). Before
// acks rode on takes, draining n messages this way made 2n calls.
func TestRunAckRidesOnTheNextTake(t *testing.T) { checkRunRides(t, newClient(t)) }

// The same on a server without Functions (its take goes as EVALSHA), and on
// a server with them while this process also talks to one without: which
// command the riding take sends is the shard's node's (before, a node
// without Functions anywhere sent every riding take as EVALSHA, refused
// NOSCRIPT on the others, each ride then sent again alone: 61 round trips
// for 30 messages).
func TestRunAckRidesWithAndWithoutFunctions(t *testing.T) {
	bare := ownPool(t, ownServer(t, "--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""), 4)
	checkRunRides(t, bare)
	checkRunRides(t, newClient(t))
}

func checkRunRides(t *testing.T, c radix.Client) {
	ctx := ctxT(t, 20*time.Second)
	cc := &countingClient{Client: c}
	q := openQueue(t, cc, Config{})
	const n = 30
	items := make([]EnqueueItem, n)
	for i := range items {
		items[i] = EnqueueItem{Payload: []byte("x")}
	}
	_, err := q.EnqueueBatch(ctx, items)
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{Concurrency: 1, NoPromoter: true, SweepInterval: time.Minute})

	var mu sync.Mutex
	var outcomes []Outcome
	var errs []error
	var start, end int64
	done := make(chan struct{})
	runUntil(t, cons, done, func(ctx context.Context, m *Message) error {
		mu.Lock()
		if start == 0 {
			start = cc.n.Load()
		}
		mu.Unlock()
		m.AfterFinish(func(o Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			outcomes, errs = append(outcomes, o), append(errs, err)
			if len(outcomes) == n {
				end = cc.n.Load()
				close(done)
			}
		})
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range outcomes {
		assert.Equal(t, OutcomeAcked, outcomes[i])
		assert.NoError(t, errs[i])
	}
	// From the first message's handler to the last one's ack: n takes, each
	// carrying the ack before it (the last ack rides on a take that finds
	// nothing), and room for the consumer's heartbeat or sweep.
	calls := end - start
	t.Logf("%d round trips for %d messages", calls, n)
	assert.LessOrEqual(t, calls, int64(n+4), "round trips for %d messages", n)
	left, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, left.InFlight, "every lease ended")
}

// Under Run, an ack riding on a take that lost its lease is reported as a
// lone ack's would be (AfterFinish: OutcomeUnfinished, ErrLeaseLost), and
// the take it rode on still delivers the next message.
func TestRunRidingAckOfALostLease(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{})
	enqueuePayloads(ctx, t, q, "lost", "next")
	cons := newConsumer(t, q, ConsumerConfig{Concurrency: 1, OnError: func(error) {}})
	var mu sync.Mutex
	got := map[string]error{}
	outcomes := map[string]Outcome{}
	done := make(chan struct{})
	runUntil(t, cons, done, func(ctx context.Context, m *Message) error {
		id := string(m.Payload)
		if id == "lost" {
			// The lease ends behind the handler's back, as when it expired
			// and the sweep took the message back.
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZREM", sh(q).Keys().Leases(), m.d.Token())))
		}
		m.AfterFinish(func(o Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			got[id], outcomes[id] = err, o
			if len(got) == 2 {
				close(done)
			}
		})
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]Outcome{"lost": OutcomeUnfinished, "next": OutcomeAcked}, outcomes)
	assert.ErrorIs(t, got["lost"], ErrLeaseLost)
	assert.NoError(t, got["next"])
}

// A message kept from an earlier fetch (a Receive that gave up) is handed to
// Run without a take: the ack waiting for one goes alone then, rather than
// wait for the next take, which comes only when a handler finishes (here:
// the kept message's, which waits for that ack).
func TestRunRidingAckDoesNotWaitBehindAKeptMessage(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{})
	enqueuePayloads(ctx, t, q, "kept")
	kept := leasedOne(t, ctx, q)
	enqueuePayloads(ctx, t, q, "first")
	cons := newConsumer(t, q, ConsumerConfig{Concurrency: 1, NoPromoter: true})
	firstDone := make(chan error, 1)
	var keptSaw error
	done := make(chan struct{})
	runUntil(t, cons, done, func(ctx context.Context, m *Message) error {
		switch string(m.Payload) {
		case "first":
			m.AfterFinish(func(_ Outcome, err error) { firstDone <- err })
			cons.fetcher.SetHeld([]*store.Delivery{kept.d}) // as a Receive that gave up leaves it
		case "kept":
			select {
			case err := <-firstDone:
				keptSaw = err
			case <-time.After(3 * time.Second):
				keptSaw = errors.New("the first message's ack waited for a take")
			}
			close(done)
		}
		return nil
	})
	assert.NoError(t, keptSaw)
}
