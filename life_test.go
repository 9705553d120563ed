package prioq

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// life_test.go: the handler timeout, the renewer (leases kept alive under
// Run) and the cancel of a message in flight.

// renewCounter counts the renewals (renew.lua: the one call that declares
// the cancel marks and not the in-flight records) made on a client.
type renewCounter struct {
	radix.Client
	n atomic.Int64
}

func (c *renewCounter) Do(ctx context.Context, a radix.Action) error {
	keys := a.Properties().Keys
	if len(keys) == 2 && strings.HasSuffix(keys[1], ":cancelled") {
		c.n.Add(1)
	}
	return c.Client.Do(ctx, a)
}

// Handlers ten times as long as the lease finish once each, none delivered
// again (a second consumer sweeps every 50 ms), and the renewer makes one
// call per interval for all of them, not one per handler. Before the
// renewer, each handler's context ended at 300 ms and its message came
// back.
func TestRunRenewsTheLeasesOfLongHandlers(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	rc := &renewCounter{Client: newClient(t)}
	q := openQueue(t, rc, Config{})
	const n, lease, work = 4, 300 * time.Millisecond, 3 * time.Second
	for range n {
		_, err := q.Enqueue(ctx, []byte("long"))
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var outcomes []Outcome
	cons := newConsumer(t, q, ConsumerConfig{Concurrency: n, Lease: lease, SweepInterval: 50 * time.Millisecond, NoPromoter: true})
	done := make(chan struct{})
	var before, after int64
	started := make(chan struct{}, n)
	go func() {
		// Once every message runs here, another consumer of the queue
		// sweeps often: an expired lease would be delivered again to it.
		for range n {
			<-started
		}
		other := newConsumer(t, q, ConsumerConfig{Lease: lease, SweepInterval: 50 * time.Millisecond, NoPromoter: true})
		_ = other.Run(ctx, func(context.Context, *Message) error {
			mu.Lock()
			defer mu.Unlock()
			seen["other"]++
			return nil
		})
	}()
	runUntil(t, cons, done, func(hctx context.Context, m *Message) error {
		mu.Lock()
		seen[m.ID]++
		if len(seen) == 1 {
			before = rc.n.Load()
		}
		mu.Unlock()
		started <- struct{}{}
		m.AfterFinish(func(o Outcome, _ error) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, o)
			if len(outcomes) == n {
				after = rc.n.Load()
				close(done)
			}
		})
		select {
		case <-time.After(work):
			return nil
		case <-hctx.Done():
			return context.Cause(hctx)
		}
	})
	time.Sleep(2 * lease) // room for a redelivery, had a lease run out
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, seen["other"], "no message delivered again")
	assert.Len(t, seen, n)
	for id, k := range seen {
		assert.Equal(t, 1, k, "deliveries of %s", id)
	}
	assert.Equal(t, []Outcome{OutcomeAcked, OutcomeAcked, OutcomeAcked, OutcomeAcked}, outcomes)
	// One renewal per interval (lease/3) for the n handlers together: about
	// work/(lease/3) = 30 calls; one per handler would be 4 times that.
	calls := after - before
	t.Logf("%d renewal calls for %d handlers over %v (interval %v)", calls, n, work, renewEvery(lease))
	assert.LessOrEqual(t, calls, int64(work/renewEvery(lease))+3)
	assert.GreaterOrEqual(t, calls, int64(work/renewEvery(lease))/2)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.InFlight+st.Ready+st.Delayed)
}

// A process that stops renewing (its client closed: what a SIGKILL does to
// its connections) leaves its message to be delivered again within one
// lease and a sweep, and its handler's context ends at the lease deadline
// (ErrLeaseExpired) rather than run past it. Before the renewer the
// message came back after 300 ms while its first handler still ran.
func TestRunMessagesOfAStoppedRenewerComeBack(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	const lease = 300 * time.Millisecond
	own := ownPool(t, testAddr, 8)
	q := openQueue(t, newClient(t), Config{})
	qa, err := Open(ctx, own, q.Name(), Config{})
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)

	started, causes := make(chan struct{}, 1), make(chan error, 1)
	a := newConsumer(t, qa, ConsumerConfig{Lease: lease, SweepInterval: time.Hour, NoPromoter: true})
	actx, stopA := context.WithCancel(ctx)
	defer stopA()
	go func() {
		_ = a.Run(actx, func(hctx context.Context, m *Message) error {
			started <- struct{}{}
			<-hctx.Done()
			causes <- context.Cause(hctx)
			return hctx.Err()
		})
	}()
	<-started
	redelivered := make(chan time.Time, 4)
	b := newConsumer(t, q, ConsumerConfig{Lease: lease, SweepInterval: 50 * time.Millisecond, NoPromoter: true})
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	go func() {
		_ = b.Run(bctx, func(context.Context, *Message) error {
			redelivered <- time.Now()
			return nil
		})
	}()
	select {
	case <-redelivered:
		t.Fatal("delivered again while its first handler's process renewed its lease")
	case err := <-causes:
		t.Fatalf("the handler's context ended while its lease was renewed: %v", err)
	case <-time.After(5 * lease):
	}
	closed := time.Now()
	require.NoError(t, own.Close())
	select {
	case at := <-redelivered:
		took := at.Sub(closed)
		t.Logf("delivered again %v after the client closed (lease %v)", took, lease)
		assert.Less(t, took, lease+time.Second, "within one lease and a sweep (and slack)")
	case <-time.After(10 * time.Second):
		t.Fatal("never delivered again")
	}
	select {
	case err := <-causes:
		assert.ErrorIs(t, err, ErrLeaseExpired)
	case <-time.After(5 * time.Second):
		t.Fatal("the handler of the stopped process still runs")
	}
}

// HandlerTimeout ends the handler's context whatever the lease (cause
// ErrHandlerTimeout) and retries the message as a handler error would: an
// attempt counted, AfterFinish sees OutcomeRetried with an error wrapping
// ErrHandlerTimeout.
func TestRunHandlerTimeout(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, newClient(t), Config{Backoff: func(int) time.Duration { return time.Millisecond }})
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{Lease: 5 * time.Second, HandlerTimeout: 200 * time.Millisecond})
	type try struct {
		attempt int
		took    time.Duration
		cause   error
		outcome Outcome
		err     error
	}
	var mu sync.Mutex
	var tries []try
	done := make(chan struct{})
	runUntil(t, cons, done, func(hctx context.Context, m *Message) error {
		start := time.Now()
		if m.Attempts == 2 {
			close(done)
			return nil
		}
		<-hctx.Done()
		mu.Lock()
		i := len(tries)
		tries = append(tries, try{attempt: m.Attempts, took: time.Since(start), cause: context.Cause(hctx)})
		mu.Unlock()
		m.AfterFinish(func(o Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			tries[i].outcome, tries[i].err = o, err
		})
		return nil // even a nil after the timeout is a retry
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, tries, 1)
	assert.ErrorIs(t, tries[0].cause, ErrHandlerTimeout)
	assert.Less(t, tries[0].took, 2*time.Second)
	assert.Equal(t, OutcomeRetried, tries[0].outcome)
	assert.ErrorIs(t, tries[0].err, ErrHandlerTimeout)

	_, err = q.NewConsumer(ConsumerConfig{HandlerTimeout: -time.Second})
	assert.ErrorIs(t, err, ErrInvalidOption)
}

// A message in flight cancelled from another Queue handle (another client):
// the handler's context ends within one renewal interval with cause
// ErrCancelled, AfterFinish gets OutcomeCancelled, the message is not
// delivered again, it is counted as cancelled, and its caller id is free.
// On a queue of one shard and on one of four. Before, Cancel answered
// ErrNotFound for a message in flight.
func TestCancelARunningMessage(t *testing.T) {
	for _, shards := range []int{1, 4} {
		t.Run(map[int]string{1: "one shard", 4: "four shards"}[shards], func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			const lease = 600 * time.Millisecond
			cfg := Config{Shards: shards}
			q := openQueue(t, newClient(t), cfg)
			other, err := Open(ctx, ownPool(t, testAddr, 4), q.Name(), cfg)
			require.NoError(t, err)
			gen, err := q.Enqueue(ctx, []byte("generated"))
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte("caller"), ID("mine"))
			require.NoError(t, err)

			type end struct {
				id    string
				cause error
				at    time.Time
			}
			var mu sync.Mutex
			handled := map[string]int{}
			outcomes := map[string]Outcome{}
			started, ended := make(chan string, 4), make(chan end, 4)
			cons := newConsumer(t, q, ConsumerConfig{Concurrency: 2, Lease: lease, SweepInterval: 50 * time.Millisecond, NoPromoter: true})
			rctx, stop := context.WithCancel(ctx)
			defer stop()
			go func() {
				_ = cons.Run(rctx, func(hctx context.Context, m *Message) error {
					mu.Lock()
					handled[m.ID]++
					mu.Unlock()
					m.AfterFinish(func(o Outcome, _ error) {
						mu.Lock()
						defer mu.Unlock()
						outcomes[m.ID] = o
					})
					started <- m.ID
					<-hctx.Done()
					ended <- end{m.ID, context.Cause(hctx), time.Now()}
					return hctx.Err()
				})
			}()
			for range 2 {
				select {
				case <-started:
				case <-ctx.Done():
					t.Fatal("the handlers never started")
				}
			}
			for _, id := range []string{gen, "mine"} {
				at := time.Now()
				require.NoError(t, other.Cancel(ctx, id))
				select {
				case e := <-ended:
					assert.Equal(t, id, e.id)
					assert.ErrorIs(t, e.cause, ErrCancelled)
					took := e.at.Sub(at)
					t.Logf("%s: the handler's context ended %v after Cancel (renewal interval %v)", id, took, renewEvery(lease))
					assert.Less(t, took, renewEvery(lease)+200*time.Millisecond)
				case <-time.After(5 * time.Second):
					t.Fatalf("the handler of %s never ended", id)
				}
			}
			time.Sleep(2 * lease) // room for a redelivery
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Zero(t, st.InFlight+st.Ready+st.Delayed+st.Dead)
			assert.Equal(t, int64(2), st.Cancelled)
			mu.Lock()
			assert.Equal(t, map[string]int{gen: 1, "mine": 1}, handled, "never delivered again")
			assert.Equal(t, map[string]Outcome{gen: OutcomeCancelled, "mine": OutcomeCancelled}, outcomes)
			mu.Unlock()
			assert.ErrorIs(t, other.Cancel(ctx, gen), ErrNotFound)
			_, err = q.Enqueue(ctx, []byte("again"), ID("mine"))
			assert.NoError(t, err, "the caller id is free again")
		})
	}
}

// Cancelling a running message of a group at its concurrency limit frees
// the group's slot: its next message is delivered at once, not after the
// cancelled one's lease.
func TestCancelARunningMessageFreesItsGroupSlot(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	q := openQueue(t, newClient(t), Config{})
	require.NoError(t, q.SetGroupLimit(ctx, "g", GroupLimit{Concurrency: 1}))
	first, err := q.Enqueue(ctx, []byte("1"), Group("g"))
	require.NoError(t, err)
	second, err := q.Enqueue(ctx, []byte("2"), Group("g"))
	require.NoError(t, err)
	started := make(chan string, 4)
	cons := newConsumer(t, q, ConsumerConfig{Concurrency: 2, Lease: 10 * time.Second, NoPromoter: true})
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = cons.Run(rctx, func(hctx context.Context, m *Message) error {
			started <- m.ID
			<-hctx.Done()
			return hctx.Err()
		})
	}()
	require.Equal(t, first, <-started)
	select {
	case id := <-started:
		t.Fatalf("%s started beside %s: the limit is 1", id, first)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, q.Cancel(ctx, first))
	select {
	case id := <-started:
		assert.Equal(t, second, id)
	case <-time.After(3 * time.Second):
		t.Fatal("the group's slot was not freed by the cancel")
	}
}

// With NoRenew a handler's context still ends at its lease deadline.
func TestRunNoRenewEndsAtTheLease(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{})
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{Lease: 200 * time.Millisecond, NoRenew: true, SweepInterval: time.Hour, NoPromoter: true})
	cause := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = cons.Run(rctx, func(hctx context.Context, m *Message) error {
			<-hctx.Done()
			cause <- context.Cause(hctx)
			return nil
		})
	}()
	select {
	case err := <-cause:
		assert.True(t, errors.Is(err, ErrLeaseExpired), "cause %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end at the lease")
	}
}

// A renewal keeps Extend's fence: it never shortens a lease the handler
// extended further, and a lease that is gone (acked) is reported lost and
// not put back.
func TestRenewKeepsTheLeaseFence(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{})
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{Lease: time.Minute, NoPromoter: true})
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Extend(ctx, time.Hour))
	score := func() string {
		var s string
		require.NoError(t, c.Do(ctx, radix.Cmd(&s, "ZSCORE", sh(q).Keys().Leases(), m.token())))
		return s
	}
	extended := score()
	codes, err := sh(q).Renew(ctx, []string{m.token()}, time.Second)
	require.NoError(t, err)
	assert.Equal(t, []int{store.RenewOK}, codes)
	assert.Equal(t, extended, score(), "a renewal shorter than the lease leaves it")

	require.NoError(t, m.Ack(ctx))
	codes, err = sh(q).Renew(ctx, []string{m.token(), "no-such-token"}, time.Second)
	require.NoError(t, err)
	assert.Equal(t, []int{store.RenewLost, store.RenewLost}, codes)
	assert.Equal(t, "", score(), "a lost lease is not put back")
}

// Through a MultiConsumer: a handler longer than its lease runs on (the
// renewer covers every queue it serves) until a Cancel from another handle
// ends it with ErrCancelled.
func TestMultiConsumerRenewsAndCancels(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	const lease = 300 * time.Millisecond
	a, b := openQueue(t, newClient(t), Config{}), openQueue(t, newClient(t), Config{Shards: 2})
	other, err := Open(ctx, ownPool(t, testAddr, 4), b.Name(), Config{Shards: 2})
	require.NoError(t, err)
	_, err = a.Enqueue(ctx, []byte("a"))
	require.NoError(t, err)
	id, err := b.Enqueue(ctx, []byte("b"))
	require.NoError(t, err)
	mc := newMulti(t, newClient(t), MultiConfig{Queues: []string{a.Name(), b.Name()},
		Consumer: ConsumerConfig{Concurrency: 2, Lease: lease, SweepInterval: 50 * time.Millisecond}})
	causes := make(chan error, 4)
	started := make(chan string, 4)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = mc.Run(rctx, func(hctx context.Context, m *Message) error {
			started <- m.ID
			<-hctx.Done()
			causes <- context.Cause(hctx)
			return hctx.Err()
		})
	}()
	for range 2 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("never started")
		}
	}
	select {
	case err := <-causes:
		t.Fatalf("a handler ended while its lease was renewed: %v", err)
	case <-time.After(4 * lease):
	}
	require.NoError(t, other.Cancel(ctx, id))
	select {
	case err := <-causes:
		assert.ErrorIs(t, err, ErrCancelled)
	case <-time.After(renewEvery(lease) + time.Second):
		t.Fatal("the cancelled handler still runs")
	}
	select {
	case again := <-started:
		t.Fatalf("%s delivered again", again)
	case <-time.After(2 * lease):
	}
}

// A handler that acks its message itself and goes on working keeps its
// context: the renewer leaves a finished delivery alone (it would find its
// lease gone and end the context with ErrLeaseLost).
func TestRunRenewerLeavesAMessageItsHandlerAcked(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{})
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	const lease = 300 * time.Millisecond
	cons := newConsumer(t, q, ConsumerConfig{Lease: lease, SweepInterval: time.Hour, NoPromoter: true})
	ended := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = cons.Run(rctx, func(hctx context.Context, m *Message) error {
			if err := m.Ack(hctx); err != nil {
				ended <- err
				return err
			}
			select {
			case <-hctx.Done():
				ended <- context.Cause(hctx)
			case <-time.After(2 * renewEvery(lease)):
				ended <- nil
			}
			return nil
		})
	}()
	select {
	case err := <-ended:
		assert.NoError(t, err, "the handler's context ended after its own ack")
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
}

// A MultiConsumer hears a cancel on its queue's channel and renews at once:
// the handler's context ends well within the renewal interval (10 s for
// this 30 s lease). Before the announcement it ended at the next renewal.
func TestMultiConsumerHearsACancelAtOnce(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	const lease = 30 * time.Second
	q := openQueue(t, newClient(t), Config{})
	id, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	mc := newMulti(t, newClient(t), MultiConfig{Queues: []string{q.Name()}, Consumer: ConsumerConfig{Lease: lease}})
	started, ended := make(chan struct{}), make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = mc.Run(rctx, func(hctx context.Context, m *Message) error {
			close(started)
			<-hctx.Done()
			ended <- context.Cause(hctx)
			return hctx.Err()
		})
	}()
	<-started
	at := time.Now()
	require.NoError(t, q.Cancel(ctx, id))
	select {
	case err := <-ended:
		took := time.Since(at)
		t.Logf("the handler's context ended %v after Cancel (renewal interval %v)", took, renewEvery(lease))
		assert.ErrorIs(t, err, ErrCancelled)
		assert.Less(t, took, 2*time.Second)
	case <-time.After(renewEvery(lease) + 5*time.Second):
		t.Fatal("the cancelled handler still runs")
	}
}

// A handler that ignores its timeout is not renewed past it: its lease runs
// out and the message goes to another consumer, as Run's grace period did
// before renewals (renewed for as long as the handler ran, it would stay
// with the stuck handler).
func TestRunStopsRenewingAfterTheHandlerTimeout(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	const lease, timeout = 300 * time.Millisecond, 200 * time.Millisecond
	q := openQueue(t, newClient(t), Config{})
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	stuck := newConsumer(t, q, ConsumerConfig{Lease: lease, HandlerTimeout: timeout, SweepInterval: time.Hour, NoPromoter: true})
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = stuck.Run(rctx, func(context.Context, *Message) error {
			close(started)
			<-release // ignores its context
			return nil
		})
	}()
	<-started
	at := time.Now()
	again := make(chan time.Duration, 1)
	other := newConsumer(t, q, ConsumerConfig{Lease: lease, SweepInterval: 50 * time.Millisecond, NoPromoter: true})
	go func() {
		_ = other.Run(rctx, func(context.Context, *Message) error {
			again <- time.Since(at)
			return nil
		})
	}()
	select {
	case took := <-again:
		t.Logf("delivered again %v after the stuck handler started (timeout %v, lease %v)", took, timeout, lease)
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck handler's lease was renewed past its timeout")
	}
}
