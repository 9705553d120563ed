package prioq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// review33_test.go: a review of AckAndReceive and the kept goroutines
// (issue 33). Each test fails on the code it was written against.

// With Config.WaitReplicas and no replica to confirm it, an ack is made but
// not confirmed: Ack says so (ErrNotReplicated), as do AckBatch, Run's
// AfterFinish and Enqueue (which returns the id beside it). AckAndReceive
// drops it: the caller gets the next message and a nil error, and never
// learns that the ack of done may be lost with the primary.
func TestReview33_AckAndReceiveDropsNotReplicated(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	cl := ownPool(t, ownServer(t), 4) // no replica
	q := openQueue(t, cl, Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond, CallTimeout: 2 * time.Second})
	for _, p := range []string{"a", "b", "c"} {
		_, err := q.Enqueue(ctx, []byte(p))
		require.True(t, err == nil || errors.Is(err, ErrNotReplicated), "enqueue: %v", err)
	}
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, SweepInterval: time.Minute, OnError: func(error) {}})

	// Ack tells it.
	a, err := cons.Receive(ctx)
	require.NoError(t, err)
	assert.ErrorIs(t, a.Ack(ctx), ErrNotReplicated, "Ack reports the unconfirmed ack")

	// AckAndReceive does not.
	b, err := cons.Receive(ctx)
	require.NoError(t, err)
	next, err := cons.AckAndReceive(ctx, b)
	if next != nil {
		defer func() { _ = next.Ack(context.WithoutCancel(ctx)) }()
	}
	assert.ErrorIs(t, err, ErrNotReplicated,
		"AckAndReceive must tell that done's ack was not confirmed by the replicas (got message %v)", next != nil)
}

// blockingClient is a Client whose calls, while block is set, signal in
// and wait for release before going to Redis.
type blockingClient struct {
	Client
	block   atomic.Bool
	in      chan struct{}
	release chan struct{}
}

func (c *blockingClient) Do(ctx context.Context, a radix.Action) error {
	if c.block.Load() {
		c.in <- struct{}{}
		<-c.release
	}
	return c.Client.Do(ctx, a)
}

// A Redis call runs in a goroutine of its own (doBounded), which used to be
// started by the caller's goroutine and so carried the caller's profiler
// labels (runtime/pprof: a goroutine inherits its creator's labels): a CPU
// or goroutine profile put the call's time (radix's encoding and decoding,
// the client's own work) under the caller that made it. A kept goroutine
// carries the labels of whichever caller started it, for every later
// caller's calls: here a call made under {caller: second} runs, and is
// profiled, under {caller: first}.
func TestReview33_KeptGoroutineCarriesAnotherCallersLabels(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	bc := &blockingClient{Client: newClient(t), in: make(chan struct{}), release: make(chan struct{})}
	q := openQueue(t, bc, Config{})

	pprof.Do(ctx, pprof.Labels("caller", "first"), func(ctx context.Context) {
		_, err := q.Len(ctx)
		require.NoError(t, err)
	})
	time.Sleep(50 * time.Millisecond) // its goroutine now waits for the next job

	bc.block.Store(true)
	done := make(chan error, 1)
	go pprof.Do(ctx, pprof.Labels("caller", "second"), func(ctx context.Context) {
		_, err := q.Len(ctx)
		done <- err
	})
	<-bc.in
	bc.block.Store(false)
	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&buf, 1))
	close(bc.release)
	require.NoError(t, <-done)

	// The goroutine profile (debug=1) groups goroutines by stack and labels:
	// find the one in blockingClient.Do.
	var labels string
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if !strings.Contains(g, "blockingClient).Do") {
			continue
		}
		for _, l := range strings.Split(g, "\n") {
			if strings.HasPrefix(l, "# labels: ") {
				labels = l
			}
		}
		if labels == "" {
			labels = "(none)"
		}
	}
	require.NotEqual(t, "", labels, "the call is in the profile")
	assert.Contains(t, labels, `"caller":"second"`, "the call made under {caller: second} is profiled under its caller's labels")
}

// A Receive waits on the fetch in progress and wakes when it ends: what is
// held is always a fetch's result, found by every caller woken with it
// (fetcher.go). AckAndReceive breaks that: when its ack fails
// (ErrLeaseLost), the message its take got goes back into held
// (Fetcher.Unreceive) after the fetch ended, and a Receive that meanwhile
// found held empty and started the next fetch waits on that fetch (for
// work that does not come: the message is leased to this consumer) while
// the message sits in held. Nothing frees it but new work, the Receive's
// ctx, or the end of its lease and a sweep that delivers it again (one
// more attempt counted). The same holds for the message put back when the
// call's ctx ends just as its take returns.
//
// The race (the AckAndReceive takes the message before the Receive starts
// the next fetch, and puts it back after) is won in about one round of ten
// here: the test repeats it until one Receive waits past a second with the
// message held, or 100 rounds.
func TestReview33_UnreceivedMessageStrandsAWaitingReceive(t *testing.T) {
	for round := range 100 {
		ctx := ctxT(t, 30*time.Second)
		c := newClient(t)
		q := openQueue(t, c, Config{})
		cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, SweepInterval: time.Minute, Lease: 10 * time.Second,
			BlockTimeout: time.Second, OnError: func(error) {}})
		enqueuePayloads(ctx, t, q, "done")
		done, err := cons.Receive(ctx)
		require.NoError(t, err)
		// done's lease is lost: the ack that rides fails.
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZREM", sh(q).Keys().Leases(), done.d.Token())))

		// AckAndReceive starts the fetch (the queue is empty: it waits for
		// work), and a Receive joins it.
		actx, acancel := context.WithCancel(ctx)
		acked := make(chan error, 1)
		go func() { _, err := cons.AckAndReceive(actx, done); acked <- err }()
		// (Since the fix the call returns as soon as its ack failed, and
		// gives back what its take got: the fetch may have ended already.)
		assert.Eventually(t, func() bool { _, running, _ := cons.fetcher.State(); return running || len(acked) > 0 },
			5*time.Second, time.Millisecond, "the fetch started")
		received := make(chan *Message, 1)
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		go func() {
			m, _ := cons.Receive(rctx)
			received <- m
		}()
		time.Sleep(20 * time.Millisecond)
		enqueuePayloads(ctx, t, q, "next")

		var got *Message
		select {
		case got = <-received:
		case <-time.After(time.Second):
		}
		held, running, _ := cons.fetcher.State()
		rcancel()
		acancel()
		assert.ErrorIs(t, <-acked, ErrLeaseLost, "round %d", round)
		if got == nil {
			got = <-received
		}
		if got != nil {
			require.NoError(t, got.Ack(ctx))
			require.NoError(t, cons.Close(ctx)) // its connections back for the next round
			continue
		}
		t.Fatalf("round %d: a Receive waited a second on a fetch (running %v) while the message it waits for was held (%d held)",
			round, running, held)
	}
}

// slowPipelines is a Client that, while slow is set, hands back a
// pipeline's replies only delay after Redis ran it.
type slowPipelines struct {
	Client
	slow  atomic.Bool
	delay time.Duration
}

func (c *slowPipelines) Do(ctx context.Context, a radix.Action) error {
	err := c.Client.Do(ctx, a)
	if _, ok := a.(*radix.Pipeline); ok && c.slow.Load() {
		time.Sleep(c.delay)
	}
	return err
}

// AckAndReceive's ack rides on a take its consumer's fetch makes, and the
// fetch goes on when the call's ctx ends: the ack is made, and recorded on
// done when the fetch's reply comes ("so that done.Ack says nil at once").
// Until then, done.Ack, the call the doc points to when unsure ("done.Ack
// returns nil at once for a message acked already"), sends an ack of its
// own, finds the lease gone (the ride removed it) and says ErrLeaseLost: the
// lease expired and the message was taken back, the work may be done twice.
// Nothing of the sort happened: this consumer acked it, with its lease
// whole. (A plain Ack whose ctx ended has the same race; AckAndReceive's
// fetch, though, knows its ack is on the way and records it: done.Ack could
// wait for that.)
func TestReview33_AckAfterCancelledAckAndReceiveSaysLeaseLost(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	sp := &slowPipelines{Client: newClient(t), delay: 500 * time.Millisecond}
	q := openQueue(t, sp, Config{})
	enqueuePayloads(ctx, t, q, "done", "next")
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, SweepInterval: time.Minute, Lease: time.Minute, OnError: func(error) {}})
	done, err := cons.Receive(ctx)
	require.NoError(t, err)

	sp.slow.Store(true) // the riding take's reply comes late
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	got, err := cons.AckAndReceive(short, done)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, got == nil)
	sp.slow.Store(false)

	assert.NoError(t, done.Ack(ctx), "this consumer acked done with its lease whole: no lease was lost")
	next, err := cons.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "next", string(next.Payload))
	require.NoError(t, next.Ack(ctx))
}

// stuckClient is a Client whose calls, while stuck is set, wait for
// release whatever their ctx says (a client that ignores its ctx: what
// doBounded's own goroutine is for).
type stuckClient struct {
	Client
	stuck   atomic.Bool
	release chan struct{}
}

func (c *stuckClient) Do(ctx context.Context, a radix.Action) error {
	if c.stuck.Load() {
		<-c.release
	}
	return c.Client.Do(ctx, a)
}

// leakTB is a testing.TB whose cleanups run when the test says, and whose
// errors are recorded, not reported.
type leakTB struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (l *leakTB) Helper()          {}
func (l *leakTB) Failed() bool     { return false }
func (l *leakTB) Cleanup(f func()) { l.cleanups = append(l.cleanups, f) }
func (l *leakTB) Errorf(format string, args ...any) {
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}

// testkit.NoLeaks counts as leaked every goroutine started during the test
// and still running at its end; goroutines that existed before it are not
// the test's. A Redis call used to run in a goroutine of its own, started
// during the test; it now runs in a kept goroutine, which may have been
// started (and left idle) before the test: a call that never returns (a
// client that ignores its ctx) holds that goroutine for good, and NoLeaks,
// which skips every goroutine it saw at the start, does not see the leak.
func TestReview33_NoLeaksMissesALeakInAKeptGoroutine(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	sc := &stuckClient{Client: newClient(t), release: make(chan struct{})}
	defer close(sc.release)
	q := openQueue(t, sc, Config{})
	_, err := q.Len(ctx) // its goroutine now waits for the next job
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)

	lt := &leakTB{TB: t}
	testkit.NoLeaks(lt)
	sc.stuck.Store(true)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = q.Len(short) // abandoned at its deadline: the call never returns
	require.Error(t, err)
	for i := len(lt.cleanups) - 1; i >= 0; i-- {
		lt.cleanups[i]() // the test's end: NoLeaks looks
	}
	found := false
	for _, e := range lt.errs {
		found = found || strings.Contains(e, "stuckClient).Do")
	}
	assert.True(t, found, "NoLeaks reports the goroutine stuck in a call made during the test (it reported %d goroutines)", len(lt.errs))
}
