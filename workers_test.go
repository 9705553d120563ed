package prioq

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/require"
)

// waitWorkers reads Workers until ok accepts them, for 5 s at most.
func waitWorkers(t *testing.T, cl Client, what string, ok func([]Worker) bool) []Worker {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ws, err := Workers(ctxT(t, 5*time.Second), cl)
		require.NoError(t, err)
		if ok(ws) {
			return ws
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen in 5 s; workers: %+v", what, ws)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func findWorker(ws []Worker, id string) (Worker, bool) {
	for _, w := range ws {
		if w.ID == id {
			return w, true
		}
	}
	return Worker{}, false
}

// A Consumer and a MultiConsumer are in the registry while they run, with
// what they serve and do; each leaves it when it closes, at once.
func TestWorkersListsConsumersWhileTheyRun(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	base := queueName(t)
	q1 := openQueue(t, cl, Config{Layout: Levels(2)})
	q2, err := Open(ctx, cl, base+"-two", Config{Layout: Levels(2)})
	require.NoError(t, err)

	c, err := q1.NewConsumer(ConsumerConfig{Concurrency: 3, Heartbeat: 50 * time.Millisecond})
	require.NoError(t, err)
	mc := newMulti(t, cl, MultiConfig{Queues: []string{q2.Name()}, Consumer: ConsumerConfig{Heartbeat: 50 * time.Millisecond}})
	require.NotEqual(t, c.ID(), mc.ID())

	ws := waitWorkers(t, cl, "both", func(ws []Worker) bool {
		_, a := findWorker(ws, c.ID())
		_, b := findWorker(ws, mc.ID())
		return a && b
	})
	w, _ := findWorker(ws, c.ID())
	host, _ := os.Hostname()
	require.Equal(t, "consumer", w.Kind)
	require.Equal(t, host, w.Host)
	require.Equal(t, os.Getpid(), w.PID)
	require.Equal(t, []string{q1.Name()}, w.Queues)
	require.Equal(t, 3, w.Concurrency)
	require.True(t, time.Since(w.LastSeen) < 5*time.Second && w.Expires.After(w.LastSeen), "%+v", w)
	m, _ := findWorker(ws, mc.ID())
	require.Equal(t, "multi", m.Kind)
	require.Equal(t, []string{q2.Name()}, m.Queues)

	// Queue.Workers: those that serve it.
	on1, err := q1.Workers(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, len(on1))
	require.Equal(t, c.ID(), on1[0].ID)

	// A queue added to the MultiConsumer shows in its next heartbeat.
	require.NoError(t, mc.Add(ctx, q1.Name()))
	waitWorkers(t, cl, "the added queue", func(ws []Worker) bool {
		m, ok := findWorker(ws, mc.ID())
		return ok && m.Serves(q1.Name()) && m.Serves(q2.Name())
	})

	// Run's handlers in flight and the messages delivered.
	for range 2 {
		_, err := q1.Enqueue(ctx, []byte("x"))
		require.NoError(t, err)
	}
	mc.Remove(q1.Name())
	release := make(chan struct{})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Run(rctx, func(ctx context.Context, m *Message) error { <-release; return nil })
	}()
	waitWorkers(t, cl, "2 in flight", func(ws []Worker) bool {
		w, ok := findWorker(ws, c.ID())
		return ok && w.InFlight == 2 && w.Delivered >= 2
	})
	close(release)
	waitWorkers(t, cl, "0 in flight", func(ws []Worker) bool {
		w, ok := findWorker(ws, c.ID())
		return ok && w.InFlight == 0
	})
	stop()
	<-done

	require.NoError(t, c.Close(ctx))

	// Close says goodbye: a consumer whose record would live three minutes
	// is gone at once.
	slow, err := q1.NewConsumer(ConsumerConfig{Heartbeat: time.Minute})
	require.NoError(t, err)
	waitWorkers(t, cl, "the slow one", func(ws []Worker) bool { _, ok := findWorker(ws, slow.ID()); return ok })
	require.NoError(t, slow.Close(ctx))
	ws = waitWorkers(t, cl, "the goodbye", func(ws []Worker) bool { _, ok := findWorker(ws, slow.ID()); return !ok })
	_, multi := findWorker(ws, mc.ID())
	require.True(t, multi)
}

// A registry lost with its keys (a restart without persistence, a DEL by
// hand) is written again whole by the next heartbeat, queue names included.
func TestWorkersRecoversALostRegistry(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	c := newConsumer(t, q, ConsumerConfig{Heartbeat: 30 * time.Millisecond})
	waitWorkers(t, cl, "listed", func(ws []Worker) bool { _, ok := findWorker(ws, c.ID()); return ok })
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "DEL", "prioq:workers:{w}:rec:"+c.ID(), "prioq:workers:{w}:q:"+c.ID())))
	ws := waitWorkers(t, cl, "listed again with its queue", func(ws []Worker) bool {
		w, ok := findWorker(ws, c.ID())
		return ok && w.Serves(q.Name())
	})
	w, _ := findWorker(ws, c.ID())
	require.Equal(t, []string{q.Name()}, w.Queues)
}

// A Redis user that may not write the registry's keys: the consumer works
// on, and OnError hears once, saying what to grant.
func TestWorkersRefusedByACLIsReportedOnce(t *testing.T) {
	name := queueName(t)
	_, cl := aclUser(t, 8, "resetkeys", "~prioq:{"+name+"}:*", "+@all", "allchannels")
	ctx := ctxT(t, 20*time.Second)
	q, err := Open(ctx, cl, name, Config{Layout: Levels(2)})
	require.NoError(t, err)
	reports := make(chan error, 100)
	c := newConsumer(t, q, ConsumerConfig{Heartbeat: 20 * time.Millisecond, OnError: func(err error) { reports <- err }})
	_, err = q.Enqueue(ctx, []byte("works"))
	require.NoError(t, err)
	m, err := c.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Ack(ctx))
	select {
	case err := <-reports:
		require.ErrorIs(t, err, ErrRegistry)
		require.True(t, strings.Contains(err.Error(), "~prioq:workers:*"), "%v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no report of the refused heartbeat")
	}
	time.Sleep(200 * time.Millisecond) // 10 more heartbeats, refused alike
	require.Equal(t, 0, len(reports), "reported more than once")
	_, err = Workers(ctx, cl)
	require.Error(t, err)
}

// A registry key of the wrong type: the heartbeat writes nothing, says so
// once, and the consumer works on; Workers fails clearly; once the key is
// repaired the consumer is listed. (A server of its own: the registry is
// server-wide.)
func TestWorkersRegistryKeyOfTheWrongType(t *testing.T) {
	cl := ownPool(t, ownServer(t), 8)
	ctx := ctxT(t, 20*time.Second)
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "SET", store.WorkerIndexKey, "not a zset")))
	q, err := Open(ctx, cl, queueName(t), Config{Layout: Levels(2)})
	require.NoError(t, err)
	reports := make(chan error, 100)
	c := newConsumer(t, q, ConsumerConfig{Heartbeat: 20 * time.Millisecond, OnError: func(err error) { reports <- err }})
	select {
	case err := <-reports:
		require.ErrorIs(t, err, ErrRegistry)
		require.True(t, strings.Contains(err.Error(), "WRONGTYPE"), "%v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no report")
	}
	var n int
	require.NoError(t, cl.Do(ctx, radix.Cmd(&n, "EXISTS", "prioq:workers:{w}:rec:"+c.ID())))
	require.Equal(t, 0, n, "a heartbeat that failed wrote its record")
	_, err = Workers(ctx, cl)
	require.True(t, err != nil && strings.Contains(err.Error(), "WRONGTYPE"), "%v", err)
	_, err = q.Enqueue(ctx, []byte("works"))
	require.NoError(t, err)
	m, err := c.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Ack(ctx))

	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "DEL", store.WorkerIndexKey)))
	waitWorkers(t, cl, "listed after the repair", func(ws []Worker) bool { _, ok := findWorker(ws, c.ID()); return ok })
	require.Equal(t, 0, len(reports), "reported more than once")
}

// A consumer whose process died never says goodbye: its record expires
// three heartbeats after the last, and the next heartbeat of any worker
// drops its index entry.
func TestWorkersForgetsAWorkerThatDied(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	dead := store.WorkerRecord{ID: "dead-" + store.RandomID(), Kind: "consumer", Host: "gone"}
	_, err := store.Heartbeat(ctx, cl, time.Second, 100*time.Millisecond, dead, []string{"q"})
	require.NoError(t, err)
	ws, err := Workers(ctx, cl)
	require.NoError(t, err)
	w, ok := findWorker(ws, dead.ID)
	require.True(t, ok)
	require.Equal(t, []string{"q"}, w.Queues)
	time.Sleep(150 * time.Millisecond)
	ws, err = Workers(ctx, cl)
	require.NoError(t, err)
	_, ok = findWorker(ws, dead.ID)
	require.False(t, ok, "an expired worker is listed")
	alive := store.WorkerRecord{ID: "alive-" + store.RandomID()}
	_, err = store.Heartbeat(ctx, cl, time.Second, time.Second, alive, []string{})
	require.NoError(t, err)
	var score *string
	require.NoError(t, cl.Do(ctx, radix.Cmd(&score, "ZSCORE", store.WorkerIndexKey, dead.ID)))
	require.True(t, score == nil, "the dead worker's index entry stays")
	require.NoError(t, store.Goodbye(ctx, cl, time.Second, alive.ID))
}

// NoHeartbeat keeps a consumer out; a negative or too short Heartbeat is
// refused.
func TestWorkersNoHeartbeatAndBadIntervals(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	c := newConsumer(t, q, ConsumerConfig{NoHeartbeat: true})
	other := newConsumer(t, q, ConsumerConfig{Heartbeat: 20 * time.Millisecond})
	waitWorkers(t, cl, "the other", func(ws []Worker) bool { _, ok := findWorker(ws, other.ID()); return ok })
	ws, err := q.Workers(ctx)
	require.NoError(t, err)
	_, listed := findWorker(ws, c.ID())
	require.False(t, listed)
	for _, d := range []time.Duration{-time.Second, time.Millisecond} {
		_, err := q.NewConsumer(ConsumerConfig{Heartbeat: d})
		require.ErrorIs(t, err, ErrInvalidOption)
	}
	_, err = Workers(ctx, nil)
	require.True(t, errors.Is(err, ErrInvalidOption))
}

// At maxmemory (noeviction) the heartbeat is refused whole: reported once,
// and the consumer takes and acks as usual; RunNow is refused and changes
// nothing. Once memory is freed the consumer is listed again and RunNow
// works.
func TestWorkersAndRunNowAtMaxMemory(t *testing.T) {
	cl := ownPool(t, ownServer(t, "--maxmemory-policy", "noeviction"), 8)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	_, err := q.Enqueue(ctx, []byte("later"), ID("d1"), Delay(time.Hour))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("now"))
	require.NoError(t, err)
	setMaxMemory(t, cl, usedMemory(t, cl)-256<<10)
	t.Cleanup(func() { setMaxMemory(t, cl, 0) })

	reports := make(chan error, 100)
	c := newConsumer(t, q, ConsumerConfig{Heartbeat: 20 * time.Millisecond, NoPromoter: true, OnError: func(err error) { reports <- err }})
	select {
	case err := <-reports:
		require.ErrorIs(t, err, ErrRegistry)
		require.True(t, strings.Contains(err.Error(), "OOM"), "%v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no report of the refused heartbeat")
	}
	m, err := c.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Ack(ctx))
	err = q.RunNow(ctx, "d1")
	require.True(t, err != nil && strings.Contains(err.Error(), "OOM"), "%v", err)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Delayed, "a refused RunNow changes nothing")
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, 0, len(reports), "reported more than once")

	setMaxMemory(t, cl, 0)
	waitWorkers(t, cl, "listed once memory is free", func(ws []Worker) bool { _, ok := findWorker(ws, c.ID()); return ok })
	require.NoError(t, q.RunNow(ctx, "d1"))
	m, err = c.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "d1", m.ID)
}

// A message in flight names the process holding it (issue 32: "in flight
// (with lease deadline and holder)"): the holder id its lease token
// carries, which the holder's consumers publish in the worker registry.
func TestLeasedNamesItsHolder(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	c, err := q.NewConsumer(ConsumerConfig{Heartbeat: 50 * time.Millisecond, Lease: time.Minute, NoPromoter: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	_, err = q.Enqueue(ctx, []byte("x"), ID("held"))
	require.NoError(t, err)
	m, err := c.Receive(ctx)
	require.NoError(t, err)

	leased, err := q.Leased(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, leased, 1)
	require.True(t, regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(leased[0].Holder), leased[0].Holder)
	ws := waitWorkers(t, cl, "the consumer", func(ws []Worker) bool { _, ok := findWorker(ws, c.ID()); return ok })
	w, _ := findWorker(ws, c.ID())
	require.Equal(t, leased[0].Holder, w.Holder, "the worker registry names the holder")
	h, ok := HolderIn(ws, leased[0].Holder)
	require.True(t, ok)
	require.Equal(t, os.Getpid(), h.PID)
	_, ok = HolderIn(ws, "")
	require.False(t, ok, "no holder names no worker")
	require.Equal(t, os.Getpid(), w.PID)

	// A token of a take before holders were named (a random suffix alone):
	// no holder, and the page still reads.
	k := q.shards[0].Keys()
	var rec string
	require.NoError(t, cl.Do(ctx, radix.Cmd(&rec, "HGET", k.Inflight(), m.token())))
	old := m.token()[:17] + "0123456789abcdef0123"
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "HSET", k.Inflight(), old, rec)))
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "ZADD", k.Leases(), "9999999999999", old)))
	leased, err = q.Leased(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, leased, 2)
	require.Equal(t, w.Holder, leased[0].Holder)
	require.Equal(t, "", leased[1].Holder)
}
