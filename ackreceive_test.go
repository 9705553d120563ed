package prioq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// ackreceive_test.go: AckAndReceive, the ack of one message and the take of
// the next in one round trip (issue 33: a loop of single calls paid three
// round trips a message, enqueue, take and ack, where the raw list loop
// pays two).

// receivedFirst is a queue holding payloads and a consumer of it that has
// received the first.
func receivedFirst(t *testing.T, payloads ...string) (context.Context, radix.Client, *Queue, *Consumer, *Message) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{})
	enqueuePayloads(ctx, t, q, payloads...)
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, SweepInterval: time.Minute, OnError: func(error) {}})
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	return ctx, c, q, cons, m
}

// A loop of AckAndReceive drains n messages in about n round trips: each
// call's ack rides on its take. Receive + Ack made 2n (before
// AckAndReceive, there was no call that said both).
func TestAckAndReceiveIsOneRoundTrip(t *testing.T) { checkAckAndReceiveRides(t, newClient(t)) }

// The same on a server without Functions: the riding take goes as EVALSHA.
func TestAckAndReceiveRidesWithoutFunctions(t *testing.T) {
	checkAckAndReceiveRides(t, ownPool(t, ownServer(t, "--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""), 4))
}

func checkAckAndReceiveRides(t *testing.T, c radix.Client) {
	ctx := ctxT(t, 20*time.Second)
	cc := &countingClient{Client: c}
	q := openQueue(t, cc, Config{})
	const n = 30
	for i := range n {
		enqueuePayloads(ctx, t, q, fmt.Sprint(i))
	}
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, SweepInterval: time.Minute})
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	start := cc.n.Load()
	got := []string{string(m.Payload)}
	for range n - 1 {
		m, err = cons.AckAndReceive(ctx, m)
		require.NoError(t, err)
		got = append(got, string(m.Payload))
	}
	calls := cc.n.Load() - start
	require.NoError(t, m.Ack(ctx))
	t.Logf("%d round trips for %d acks and takes", calls, n-1)
	// One per call, and room for the consumer's heartbeat or a sweep.
	assert.LessOrEqual(t, calls, int64(n-1+3))
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	assert.Equal(t, want, got, "every message once, in order")
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.InFlight, "every lease ended")
	assert.Zero(t, st.Ready)
}

// A lost lease: AckAndReceive returns ErrLeaseLost and no message, and the
// message its take got is the next Receive's, not lost nor left leased to
// nobody (see also TestReview33_UnreceivedMessageStrandsAWaitingReceive).
func TestAckAndReceiveOfALostLease(t *testing.T) {
	ctx, c, q, cons, m := receivedFirst(t, "lost", "next")
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZREM", sh(q).Keys().Leases(), m.d.Token())))

	got, err := cons.AckAndReceive(ctx, m)
	assert.ErrorIs(t, err, ErrLeaseLost)
	assert.True(t, got == nil, "no message")

	// What the take got is given back (not counted), or kept by the fetch
	// for the next Receive: either way the next Receive gets it, as a first
	// delivery.
	next, err := cons.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "next", string(next.Payload))
	assert.Equal(t, 1, next.Attempts)
	require.NoError(t, next.Ack(ctx))
}

// When the queue is empty after the ack, the ack is made at once, not when
// work comes: the fetch that waits for work sends it alone first. The call
// then returns the message enqueued later.
func TestAckAndReceiveAcksBeforeWaitingForWork(t *testing.T) {
	ctx, c, q, cons, m := receivedFirst(t, "only")

	type result struct {
		m   *Message
		err error
	}
	res := make(chan result, 1)
	go func() {
		next, err := cons.AckAndReceive(ctx, m)
		res <- result{next, err}
	}()
	deadline := time.Now().Add(3 * time.Second)
	for leased(t, ctx, c, q, m) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.False(t, leased(t, ctx, c, q, m), "the ack is made while the call waits for work")
	select {
	case r := <-res:
		t.Fatalf("returned before any work came: %v, %v", r.m, r.err)
	default:
	}
	enqueuePayloads(ctx, t, q, "later")
	r := <-res
	require.NoError(t, r.err)
	assert.Equal(t, "later", string(r.m.Payload))
	require.NoError(t, r.m.Ack(ctx))
}

// A ctx that ends while the call waits for work returns ctx's error; the
// ack is made, and a message that comes later is not lost.
func TestAckAndReceiveCancelled(t *testing.T) {
	ctx, c, q, cons, m := receivedFirst(t, "only")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	got, err := cons.AckAndReceive(short, m)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, got == nil, "no message")
	assert.False(t, leased(t, ctx, c, q, m), "the ack was made")
	require.NoError(t, m.Ack(ctx), "acked already: nil at once")

	enqueuePayloads(ctx, t, q, "later")
	next, err := cons.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "later", string(next.Payload))
	require.NoError(t, next.Ack(ctx))
}

// A take that fails (the records hash of the wrong type) fails no ack
// riding on it: the call returns the take's error, and the ack stands.
func TestAckAndReceiveTakeFails(t *testing.T) {
	ctx, c, q, cons, m := receivedFirst(t, "a", "b")
	inflight := sh(q).Keys().Inflight()
	var rec map[string]string
	require.NoError(t, c.Do(ctx, radix.Cmd(&rec, "HGETALL", inflight)))
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", inflight)))
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", inflight, "not a hash")))

	got, err := cons.AckAndReceive(ctx, m)
	require.Error(t, err)
	assert.True(t, got == nil, "no message")
	assert.False(t, errors.Is(err, ErrLeaseLost), "the take's error, not the ack's: %v", err)
	assert.False(t, leased(t, ctx, c, q, m), "the ack was made")
	assert.Equal(t, int32(OutcomeAcked), m.finished.Load())
	n, err := q.Len(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the take undid its pop: b waits")
}

// Where the ack cannot ride, AckAndReceive acks alone and then receives:
// a message kept from an earlier fetch (no take comes), a message with a
// caller id (ack.lua), a message of another queue, one with a result; each
// is acked and the next message comes. Bad input changes nothing.
func TestAckAndReceiveWhereItCannotRide(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{})
	other := openQueue(t, c, Config{})
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, SweepInterval: time.Minute})
	ocons := newConsumer(t, other, ConsumerConfig{NoPromoter: true, SweepInterval: time.Minute})

	receiveOne := func(cons *Consumer, opts ...Option) *Message {
		t.Helper()
		_, err := cons.q.Enqueue(ctx, []byte("x"), opts...)
		require.NoError(t, err)
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		return m
	}
	check := func(name string, done *Message, next string) {
		t.Helper()
		of := q
		if done.Queue() == other.Name() {
			of = other
		}
		got, err := cons.AckAndReceive(ctx, done)
		require.NoError(t, err, name)
		assert.Equal(t, next, string(got.Payload), name)
		assert.False(t, leased(t, ctx, c, of, done), "%s: acked", name)
		require.NoError(t, got.Ack(ctx))
	}

	// Kept: held by the fetcher, handed out without a take.
	done := receiveOne(cons)
	enqueuePayloads(ctx, t, q, "kept")
	kept, err := cons.Receive(ctx)
	require.NoError(t, err)
	cons.fetcher.SetHeld([]*store.Delivery{kept.d})
	check("kept", done, "kept")

	done = receiveOne(cons, ID("caller-id"))
	enqueuePayloads(ctx, t, q, "after caller id")
	check("caller id", done, "after caller id")

	done = receiveOne(ocons)
	enqueuePayloads(ctx, t, q, "after other queue")
	check("other queue", done, "after other queue")

	done = receiveOne(cons)
	require.NoError(t, done.SetResult([]byte("r")))
	enqueuePayloads(ctx, t, q, "after result")
	check("result", done, "after result")

	_, err = cons.AckAndReceive(ctx, nil)
	assert.ErrorIs(t, err, ErrInvalidOption)
	fq := openQueue(t, c, Config{Mode: AtMostOnce})
	fcons := newConsumer(t, fq, ConsumerConfig{NoPromoter: true})
	enqueuePayloads(ctx, t, fq, "popped", "stays")
	popped, err := fcons.Receive(ctx)
	require.NoError(t, err)
	_, err = fcons.AckAndReceive(ctx, popped)
	assert.ErrorIs(t, err, ErrWrongMode)
	n, err := fq.Len(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "nothing taken")
}

// At maxmemory (noeviction) the ack and the take both free memory: the
// call runs, on Functions and on EVALSHA alike.
func TestAckAndReceiveAtMaxMemory(t *testing.T) {
	for _, srv := range []struct {
		name string
		args []string
	}{{"functions", nil}, {"evalsha", []string{"--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""}}} {
		t.Run(srv.name, func(t *testing.T) {
			c := ownPool(t, ownServer(t, append([]string{"--maxmemory-policy", "noeviction"}, srv.args...)...), 8)
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{})
			enqueuePayloads(ctx, t, q, "a", "b", "c")
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, SweepInterval: time.Minute})
			m, err := cons.Receive(ctx)
			require.NoError(t, err)
			setMaxMemory(t, c, usedMemory(t, c)-256<<10)
			t.Cleanup(func() { setMaxMemory(t, c, 0) })
			_, err = q.Enqueue(ctx, []byte("refused"))
			require.ErrorContains(t, err, "OOM", "Redis is full")

			for _, want := range []string{"b", "c"} {
				m, err = cons.AckAndReceive(ctx, m)
				require.NoError(t, err, "at maxmemory")
				assert.Equal(t, want, string(m.Payload))
			}
			require.NoError(t, m.Ack(ctx))
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Zero(t, st.InFlight+st.Ready)
		})
	}
}
