package prioq

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// The findings of a fresh review (issue 17), one test each; every one failed
// on the code before its fix.

// liveIDs lists the ids of the queue's ready messages, in serving order.
func liveIDs(t *testing.T, q *Queue) []string {
	t.Helper()
	peek, err := q.Peek(context.Background(), MaxBatch)
	require.NoError(t, err)
	var out []string
	for _, m := range peek {
		out = append(out, m.ID)
	}
	return out
}

// 1. A caller's ID equal to the generated id of a live message must never
// replace or shadow it, whatever state that message is in. Before the fix
// the ID was accepted: a delayed message's record was overwritten (A never
// delivered, B delivered at A's due time), and in other states two live
// messages shared one id.
func TestCallerIDCannotTakeALiveGeneratedID(t *testing.T) {
	c := newClient(t)
	states := []string{"delayed", "ready", "in flight", "dead"}
	for _, l := range someLayouts {
		for _, state := range states {
			t.Run(l.name+"/"+state, func(t *testing.T) {
				ctx := ctxT(t, 10*time.Second)
				q := openQueue(t, c, Config{Layout: l.layout})
				var opts []Option
				if state == "delayed" {
					opts = append(opts, Delay(300*time.Millisecond))
				}
				a, err := q.Enqueue(ctx, []byte("A"), opts...)
				require.NoError(t, err)
				switch state {
				case "in flight", "dead":
					got, _, err := sh(q).take(ctx, sh(q).k.highFirst, 1, time.Minute)
					require.NoError(t, err)
					require.Len(t, got, 1)
					if state == "dead" {
						require.NoError(t, got[0].fail(ctx, 0, "boom", failDead))
					}
				}
				_, err = q.Enqueue(ctx, []byte("B"), ID(a), Delay(1500*time.Millisecond))
				require.Error(t, err, "an ID equal to a live generated id is refused")
				assert.True(t, errors.Is(err, ErrInvalidID) || errors.Is(err, ErrDuplicate), "err: %v", err)
				st, err := q.Stats(ctx)
				require.NoError(t, err)
				assert.Equal(t, int64(1), st.Ready+st.Delayed+st.InFlight+st.Dead, "one message, A")
				if state == "delayed" {
					cons := newConsumer(t, q, ConsumerConfig{})
					m, err := cons.Receive(ctx)
					require.NoError(t, err)
					assert.Equal(t, a, m.ID)
					assert.Equal(t, "A", string(m.Payload), "A's record is intact")
					require.NoError(t, m.Ack(ctx))
				}
			})
		}
	}
}

// legacyID has the form of the ids prioq generated before ids had a form of
// their own (20 characters of 0-9a-v): a caller may still pass such an id,
// and a message stored by an earlier version may still hold it.
const legacyID = "0ujtsle6o8e4l2ob1r80"

// sendLegacy stores a message with a generated id of the earlier form, as an
// earlier version did.
func sendLegacy(t *testing.T, q *Queue, payload string, due string) {
	t.Helper()
	p, err := q.prepare(q.now(), []byte(payload), nil)
	require.NoError(t, err)
	p.id, p.due = legacyID, due
	e, err := decodeEnvelope(p.env)
	require.NoError(t, err)
	e.ID = legacyID
	p.env = e.encode()
	res, err := sh(q).send(context.Background(), []prepared{p})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
}

// Messages stored by an earlier version keep generated ids that a caller can
// pass: no enqueue and no delayed retry may overwrite the delayed record of
// another message with that id.
func TestLegacyGeneratedIDsKeepTheirDelayedRecords(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name+"/enqueue", func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			sendLegacy(t, q, "A", "+300")
			_, err := q.Enqueue(ctx, []byte("B"), ID(legacyID), Delay(time.Second))
			require.ErrorIs(t, err, ErrDuplicate, "the delayed record of the earlier message holds the id")
			var rec string
			require.NoError(t, c.Do(ctx, radix.Cmd(&rec, "HGET", sh(q).k.dstore, legacyID)))
			assert.True(t, strings.HasSuffix(rec, "A"), "A's record is intact")
		})
		t.Run(l.name+"/retry", func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			sendLegacy(t, q, "A", "")
			_, err := q.Enqueue(ctx, []byte("B"), ID(legacyID), Delay(400*time.Millisecond))
			require.NoError(t, err, "nothing delayed holds the id: the caller's message is stored")
			got, _, err := sh(q).take(ctx, sh(q).k.highFirst, 1, time.Minute)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.NoError(t, got[0].Retry(ctx, 200*time.Millisecond, "again"))
			cons := newConsumer(t, q, ConsumerConfig{})
			var payloads []string
			for range 2 {
				m, err := cons.Receive(ctx)
				require.NoError(t, err)
				payloads = append(payloads, string(m.Payload))
				require.NoError(t, m.Ack(ctx))
			}
			assert.Equal(t, []string{"A", "B"}, payloads, "both messages are delivered")
		})
	}
}

// 2. Retrying an enqueue that returned ErrNotReplicated with the id it
// returned must not store a second copy. Before the fix the retry was stored
// (and returned ErrNotReplicated again): two messages.
func TestRetryAfterNotReplicatedStoresNoCopy(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	cl := ownPool(t, ownServer(t), 4) // no replica: every WAIT falls short
	q := openQueue(t, cl, Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})

	id, err := q.Enqueue(ctx, []byte("generated"))
	require.ErrorIs(t, err, ErrNotReplicated)
	require.NotEmpty(t, id)
	_, err = q.Enqueue(ctx, []byte("generated"), ID(id))
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrNotReplicated), "the retry stored nothing: %v", err)

	mine, err := q.Enqueue(ctx, []byte("mine"), ID("order-1"))
	require.ErrorIs(t, err, ErrNotReplicated)
	assert.Equal(t, "order-1", mine)
	_, err = q.Enqueue(ctx, []byte("mine"), ID("order-1"))
	require.ErrorIs(t, err, ErrDuplicate, "a retry with the caller's own ID is idempotent")

	n, err := q.Len(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "one copy of each")
}

// hugeScore is a score of 400 digits: digits only, but beyond a double, so
// ZADD refuses it.
var hugeScore = strings.Repeat("9", 400)

// damageScore replaces the score field of a "lane|score|rest" record.
func damageScore(rec string) string {
	lane, rest, _ := strings.Cut(rec, "|")
	_, rest, _ = strings.Cut(rest, "|")
	return lane + "|" + hugeScore + "|" + rest
}

// 3. A Range record whose score does not fit a double (digits only) must go
// to the dead letters alone. Before the fix the scripts wrote first and then
// failed at ZADD ("ERR value is not a valid float"): the sweep lost three
// healthy messages with the damaged one, RequeueAllDead three dead letters.
func TestDamagedRangeScoreIsBuriedAlone(t *testing.T) {
	c := newClient(t)
	lay := Range(-1000, 1000, 4)
	inFlight := func(t *testing.T, q *Queue) []*Message {
		ctx := context.Background()
		for i := range 4 {
			_, err := q.Enqueue(ctx, []byte{'a' + byte(i)}, Priority(int64(i*100)))
			require.NoError(t, err)
		}
		got, _, err := sh(q).take(ctx, sh(q).k.highFirst, 4, 20*time.Millisecond)
		require.NoError(t, err)
		require.Len(t, got, 4)
		var rec string
		require.NoError(t, c.Do(ctx, radix.Cmd(&rec, "HGET", sh(q).k.inflight, got[1].token)))
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", sh(q).k.inflight, got[1].token, damageScore(rec))))
		return got
	}
	counts := func(t *testing.T, q *Queue) (ready, inflight, dead int64) {
		st, err := q.Stats(context.Background())
		require.NoError(t, err)
		return st.Ready, st.InFlight, st.Dead
	}
	t.Run("sweep", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		q := openQueue(t, c, Config{Layout: lay})
		inFlight(t, q)
		time.Sleep(50 * time.Millisecond)
		_, _, _, err := sh(q).sweep(ctx, 100)
		require.NoError(t, err)
		ready, inflight, dead := counts(t, q)
		assert.Equal(t, []int64{3, 0, 1}, []int64{ready, inflight, dead})
	})
	for _, op := range []string{failRetry, failDead} {
		t.Run("fail "+op, func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: lay})
			got := inFlight(t, q)
			for _, m := range got {
				_, err := sh(q).fail(ctx, m.token, 0, "x", op)
				require.NoError(t, err)
			}
			ready, inflight, dead := counts(t, q)
			if op == failRetry {
				assert.Equal(t, []int64{3, 0, 1}, []int64{ready, inflight, dead})
			} else {
				assert.Equal(t, []int64{0, 0, 4}, []int64{ready, inflight, dead})
			}
		})
	}
	t.Run("close", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		q := openQueue(t, c, Config{Layout: lay})
		got := inFlight(t, q)
		cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
		_ = cons.fetcher.giveBack(ctx, got)
		ready, inflight, dead := counts(t, q)
		assert.Equal(t, []int64{3, 0, 1}, []int64{ready, inflight, dead})
	})
	t.Run("promote", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		q := openQueue(t, c, Config{Layout: lay})
		for i := range 4 {
			_, err := q.Enqueue(ctx, []byte("d"), ID(string(rune('a'+i))), Delay(time.Minute), Priority(int64(i)))
			require.NoError(t, err)
		}
		damageDelayed(t, q, "b", damageScore)
		moved, _, _, err := sh(q).promoteAt(ctx, fmtInt(time.Now().Add(time.Hour).UnixMilli()))
		require.NoError(t, err)
		assert.Equal(t, 3, moved)
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		assert.Equal(t, []int64{3, 0, 1}, []int64{st.Ready, st.Delayed, st.Dead})
	})
	t.Run("requeue dead", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		q := openQueue(t, c, Config{Layout: lay})
		for i := range 4 {
			_, err := q.Enqueue(ctx, []byte("d"), ID(string(rune('a'+i))), Priority(int64(i)))
			require.NoError(t, err)
		}
		got, _, err := sh(q).take(ctx, sh(q).k.highFirst, 4, time.Minute)
		require.NoError(t, err)
		for _, m := range got {
			require.NoError(t, m.fail(ctx, 0, "x", failDead))
		}
		var recs []string
		require.NoError(t, c.Do(ctx, radix.Cmd(&recs, "LRANGE", sh(q).k.dead, "0", "-1")))
		require.Len(t, recs, 4)
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "LSET", sh(q).k.dead, "1", damageScore(recs[1]))))
		damaged := got[1].ID
		err = q.RequeueDead(ctx, damaged)
		assert.ErrorIs(t, err, ErrCorrupt)
		n, err := q.RequeueAllDead(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(3), n)
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		assert.Equal(t, []int64{3, 1}, []int64{st.Ready, st.Dead}, "the damaged dead letter stays, the others are back")
	})
}

// holdOne makes cons hold one message fetched after its caller gave up (it
// is neither handed out nor given back): the situation Close meets.
func holdOne(t *testing.T, q *Queue, cons *Consumer, opts ...Option) string {
	t.Helper()
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	_, err := cons.Receive(short) // gives up; its fetch goes on
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	id, err := q.Enqueue(context.Background(), []byte("held"), opts...)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		cons.fetcher.mu.Lock()
		defer cons.fetcher.mu.Unlock()
		return len(cons.fetcher.held) == 1 && cons.fetcher.running == nil
	}, 5*time.Second, time.Millisecond, "the fetch took the message for nobody")
	return id
}

// 4. Close gives back what the consumer holds whatever ctx it gets: an
// AtMostOnce message exists nowhere else, and an AtLeastOnce one should not
// wait out its lease (nor count an attempt). Before the fix, Close with an
// ended ctx put the AtMostOnce message back with that ctx, and lost it.
func TestCloseWithEndedCtxGivesBackWhatItHolds(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			q := openQueue(t, c, Config{Mode: m.mode})
			cons, err := q.NewConsumer(ConsumerConfig{NoPromoter: true, BlockTimeout: time.Second, Lease: time.Minute})
			require.NoError(t, err)
			id := holdOne(t, q, cons)
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			_ = cons.Close(ended) // may say the give-back goes on after it
			ctx := ctxT(t, 10*time.Second)
			assert.Eventually(t, func() bool { return len(liveIDs(t, q)) == 1 }, 5*time.Second, 10*time.Millisecond,
				"the held message is back in its lane")
			assert.Equal(t, []string{id}, liveIDs(t, q))
			if m.mode == AtLeastOnce {
				st, err := q.Stats(ctx)
				require.NoError(t, err)
				assert.Equal(t, int64(0), st.InFlight)
			}
		})
	}
}

// 5. A held AtMostOnce message keeps its caller id until it is handed out,
// so that the id cannot be enqueued again meanwhile and then be alive twice
// once Close gives the held one back. Before the fix the id was released at
// the pop and Close re-added it: two live messages "x".
func TestHeldAtMostOnceMessageKeepsItsID(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{Mode: AtMostOnce})
	cons, err := q.NewConsumer(ConsumerConfig{NoPromoter: true, BlockTimeout: time.Second})
	require.NoError(t, err)
	holdOne(t, q, cons, ID("x"))
	_, err = q.Enqueue(ctx, []byte("again"), ID("x"))
	assert.ErrorIs(t, err, ErrDuplicate, "the held message is alive")
	require.NoError(t, cons.Close(ctx))
	assert.Equal(t, []string{"x"}, liveIDs(t, q), "one live message x")

	cons2 := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	m, err := cons2.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "held", string(m.Payload))
	_, err = q.Enqueue(ctx, []byte("after"), ID("x"))
	assert.NoError(t, err, "handed out, the id is free again")
}

// 6. Expired leases come back in the order their messages were taken (their
// age in the lane), not in the order the leases ended: an Extend or two takes
// in one millisecond must not reorder them. Before the fix Levels put the
// newer one first (always with the Extend; 12 of 30 runs with the takes).
func TestRedeliveryKeepsAgeOrder(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name+"/extend", func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			ids := []string{"a", "b", "c"}
			enqueueIDs(ctx, t, q, ids...)
			older, _, err := sh(q).take(ctx, sh(q).k.highFirst, 1, 50*time.Millisecond)
			require.NoError(t, err)
			_, _, err = sh(q).take(ctx, sh(q).k.highFirst, 1, 50*time.Millisecond)
			require.NoError(t, err)
			require.NoError(t, older[0].Extend(ctx, 100*time.Millisecond))
			time.Sleep(150 * time.Millisecond)
			_, _, _, err = sh(q).sweep(ctx, 100)
			require.NoError(t, err)
			assert.Equal(t, ids, liveIDs(t, q))
		})
		t.Run(l.name+"/same millisecond", func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			for run := range 30 {
				ids := []string{"a", "b", "c"}
				enqueueIDs(ctx, t, q, ids...)
				for range 2 {
					_, _, err := sh(q).take(ctx, sh(q).k.highFirst, 1, 2*time.Millisecond)
					require.NoError(t, err)
				}
				time.Sleep(5 * time.Millisecond)
				_, _, _, err := sh(q).sweep(ctx, 100)
				require.NoError(t, err)
				require.Equal(t, ids, liveIDs(t, q), "run %d", run)
				_, err = q.Purge(ctx)
				require.NoError(t, err)
			}
		})
	}
}

// 7. A lane key of the wrong type must not stop takes from the other lanes,
// nor a sweep, a promotion or a requeue of the others' messages: those go on,
// and what belongs to the broken lane waits in the dead letters (requeued
// once the key is mended). Before the fix every take failed with WRONGTYPE
// (a higher lane) and a sweep, promotion or RequeueAllDead touching the lane
// failed whole.
func TestWrongTypedLaneLeavesTheOthersWorking(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		for _, l := range threeLanes {
			t.Run(m.name+"/"+l.name+"/take", func(t *testing.T) {
				ctx := ctxT(t, 10*time.Second)
				var logged lockedBuffer
				q := openQueue(t, c, Config{Layout: l.layout, Mode: m.mode, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
				require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", sh(q).k.lanes[2], "not a lane")))
				var errs atomic.Int64
				cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, BlockTimeout: 200 * time.Millisecond,
					OnError: func(error) { errs.Add(1) }})
				mid, err := q.Enqueue(ctx, []byte("mid"), Priority(laneTop(l.layout, 1)))
				require.NoError(t, err)
				low, err := q.Enqueue(ctx, []byte("low"), Priority(0))
				require.NoError(t, err)
				for _, want := range []string{mid, low} {
					got, err := cons.Receive(ctx)
					require.NoError(t, err)
					assert.Equal(t, want, got.ID)
				}
				// Idle, then a message for the lowest lane: picked up at once.
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				done := make(chan *Message, 1)
				go func() { got, _ := cons.Receive(rctx); done <- got }()
				time.Sleep(300 * time.Millisecond)
				late, err := q.Enqueue(ctx, []byte("late"), Priority(0))
				require.NoError(t, err)
				start := time.Now()
				got := <-done
				require.True(t, got != nil, "picked up")
				assert.Equal(t, late, got.ID)
				assert.Less(t, time.Since(start), time.Second)
				// Passed by, not in silence.
				if m.mode == AtLeastOnce {
					assert.Contains(t, logged.String(), "lane keys of the wrong type")
				} else {
					assert.Greater(t, errs.Load(), int64(0), "reported to OnError")
				}
			})
		}
	}
	for _, l := range threeLanes {
		t.Run(l.name+"/sweep", func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			enqueueIDs(ctx, t, q, "a")
			_, err := q.Enqueue(ctx, []byte("hi"), ID("hi"), Priority(laneTop(l.layout, 2)))
			require.NoError(t, err)
			got, _, err := sh(q).take(ctx, sh(q).k.highFirst, 2, 10*time.Millisecond)
			require.NoError(t, err)
			require.Len(t, got, 2)
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", sh(q).k.lanes[2], "not a lane")))
			time.Sleep(30 * time.Millisecond)
			_, _, _, err = sh(q).sweep(ctx, 100)
			require.NoError(t, err)
			assert.Equal(t, []string{"a"}, liveIDs(t, q))
			dead, err := q.DeadLetters(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, dead, 1)
			assert.Equal(t, "hi", dead[0].ID)

			n, err := q.RequeueAllDead(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(0), n, "its lane is still broken: it stays")
			err = q.RequeueDead(ctx, "hi")
			assert.ErrorIs(t, err, ErrCorrupt)
			assert.ErrorContains(t, err, "wrong type")
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", sh(q).k.lanes[2])))
			require.NoError(t, q.RequeueDead(ctx, "hi"))
			assert.Equal(t, []string{"hi", "a"}, liveIDs(t, q))
		})
		t.Run(l.name+"/promote", func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			_, err := q.Enqueue(ctx, []byte("lo"), ID("lo"), Delay(time.Minute), Priority(0))
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte("hi"), ID("hi"), Delay(time.Minute), Priority(laneTop(l.layout, 2)))
			require.NoError(t, err)
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", sh(q).k.lanes[2], "not a lane")))
			moved, _, _, err := sh(q).promoteAt(ctx, fmtInt(time.Now().Add(time.Hour).UnixMilli()))
			require.NoError(t, err)
			assert.Equal(t, 1, moved)
			assert.Equal(t, []string{"lo"}, liveIDs(t, q))
			dead, err := q.DeadLetters(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, dead, 1)
			assert.Equal(t, "hi", dead[0].ID)
		})
	}
}

// laneTop is the highest priority of lane i of a layout of threeLanes.
func laneTop(l Layout, i int) int64 {
	for p := l.hi; l.kind == kindRange; p-- {
		if lane, _ := l.laneOf(p); lane == i {
			return p
		}
	}
	return int64(i)
}

// An AtMostOnce message held at Close whose lane key now holds the wrong
// type has nowhere to go: Close says so, and its caller id is released,
// while the messages of the other lanes are back.
func TestAtMostOnceGiveBackIntoABrokenLane(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{Layout: Levels(3), Mode: AtMostOnce})
	_, err := q.Enqueue(ctx, []byte("hi"), ID("hi"), Priority(2))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("lo"), ID("lo"), Priority(0))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	var held []*Message
	for range 2 {
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		held = append(held, m)
	}
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", sh(q).k.lanes[2], "not a lane")))
	err = cons.fetcher.giveBack(ctx, held)
	assert.ErrorContains(t, err, "1 of 2 messages lost")
	assert.Equal(t, []string{"lo"}, liveIDs(t, q))
	_, err = q.Enqueue(ctx, []byte("again"), ID("hi"), Priority(1))
	assert.NoError(t, err, "the lost message's id is free")
}

// lockedBuffer is a bytes.Buffer for a logger written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// 8. A call queued behind a merged call returns by its own deadline (its
// ctx's, else CallTimeout from when it was made), however many merged calls
// are ahead of it. Before the fix each merged call had its own CallTimeout:
// with Redis paused, the last of 1,000 enqueues returned after ~1.5 s.
func TestQueuedCallsReturnByTheirDeadline(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	addr := ownServer(t)
	cl := ownPool(t, addr, 8)
	q := openQueue(t, cl, Config{Layout: Levels(1), CallTimeout: 300 * time.Millisecond})
	admin := ownPool(t, addr, 1)
	require.NoError(t, admin.Do(ctx, radix.Cmd(nil, "CLIENT", "PAUSE", "3000", "WRITE")))
	t.Cleanup(func() { _ = admin.Do(context.Background(), radix.Cmd(nil, "CLIENT", "UNPAUSE")) })

	var wg sync.WaitGroup
	var slowest atomic.Int64
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, _ = q.Enqueue(context.Background(), []byte("x"))
			if d := int64(time.Since(start)); d > slowest.Load() {
				for old := slowest.Load(); d > old && !slowest.CompareAndSwap(old, d); old = slowest.Load() {
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("slowest enqueue returned after %v", time.Duration(slowest.Load()).Round(time.Millisecond))
	assert.Less(t, time.Duration(slowest.Load()), 300*time.Millisecond+abandonGrace+300*time.Millisecond)
}

// 9. A WaitTimeout under a millisecond was sent as "WAIT n 0", which waits
// forever: every write then took the whole CallTimeout. Open refuses it.
func TestSubMillisecondWaitTimeoutIsRefused(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	_, err := Open(ctx, newClient(t), queueName(t), Config{WaitReplicas: 1, WaitTimeout: 500 * time.Microsecond,
		CallTimeout: 2 * time.Second})
	assert.ErrorIs(t, err, ErrInvalidOption)

	// And should one get through, WAIT's timeout rounds up: 1 ms, not 0.
	cl := ownPool(t, ownServer(t), 4) // no replica
	q := openQueue(t, cl, Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond, CallTimeout: 2 * time.Second})
	q.cfg.WaitTimeout = 500 * time.Microsecond
	start := time.Now()
	_, err = q.Enqueue(ctx, []byte("x"))
	assert.ErrorIs(t, err, ErrNotReplicated)
	assert.Less(t, time.Since(start), 500*time.Millisecond)
}

// 10. Close gives back what it holds in one round trip, without waiting for
// replicas (a give-back acknowledges nothing), and returns nil when every
// message is back. Before the fix it waited WaitTimeout per message and
// returned ErrNotReplicated.
func TestCloseGivesBackInOneRoundTripWithoutWaitingForReplicas(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	cl := ownPool(t, ownServer(t), 8)
	q := openQueue(t, cl, Config{Layout: Levels(2), WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
	ids := []string{"a", "b", "c", "d", "e"}
	plain, err := Open(ctx, cl, q.Name(), Config{Layout: Levels(2)}) // enqueues need no replica
	require.NoError(t, err)
	enqueueIDs(ctx, t, plain, ids...)
	cons, err := q.NewConsumer(ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	msgs, err := cons.ReceiveBatch(ctx, 5)
	require.NoError(t, err)
	require.Len(t, msgs, 5)
	cons.fetcher.mu.Lock()
	cons.fetcher.held = msgs
	cons.fetcher.mu.Unlock()
	_, err = sh(q).release(ctx, nil) // loads the script: NOSCRIPT would count a second call
	require.NoError(t, err)
	before := commandCalls(t, cl)
	start := time.Now()
	err = cons.Close(ctx)
	took := time.Since(start)
	after := commandCalls(t, cl)
	assert.NoError(t, err)
	assert.Less(t, took, 200*time.Millisecond)
	assert.Equal(t, 0, after["wait"]-before["wait"], "no WAIT")
	assert.LessOrEqual(t, after["evalsha"]+after["eval"]-before["evalsha"]-before["eval"], 1, "one script call")
	assert.Equal(t, ids, liveIDs(t, q))
}

// 11. Once Run has cancelled a handler's context because its lease ran out,
// an Extend of that delivery fails with ErrLeaseExpired: the context cannot
// come back to life, so the handler must not be told the lease was extended.
// Before the fix the Extend returned nil while ctx stayed cancelled.
func TestExtendAfterTheLeaseContextEndedFails(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{})
	_, err := q.Enqueue(ctx, []byte("slow"))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{Lease: 300 * time.Millisecond, SweepInterval: time.Hour, NoPromoter: true})
	extendErr := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = cons.Run(rctx, func(hctx context.Context, m *Message) error {
			<-hctx.Done()
			err := m.Extend(context.Background(), 5*time.Second)
			extendErr <- err
			stop()
			return err
		})
	}()
	select {
	case err := <-extendErr:
		assert.ErrorIs(t, err, ErrLeaseExpired)
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
}

// 12. A duration below MinDuration is refused where it is configured: a
// 30 ns lease made the sweeper spin (thousands of sweeps in 300 ms).
func TestTinyDurationsAreRefused(t *testing.T) {
	c := newClient(t)
	q := openQueue(t, c, Config{})
	for _, d := range []time.Duration{30, 5 * time.Millisecond} {
		for name, cfg := range map[string]ConsumerConfig{
			"Lease": {Lease: d}, "BlockTimeout": {BlockTimeout: d}, "PromoteWait": {PromoteWait: d},
			"SweepInterval": {SweepInterval: d}, "GracePeriod": {GracePeriod: d}, "RetryInterval": {RetryInterval: d},
		} {
			cons, err := q.NewConsumer(cfg)
			if !assert.ErrorIs(t, err, ErrInvalidOption, "%s %v", name, d) {
				_ = cons.Close(context.Background())
			}
		}
		for name, cfg := range map[string]Config{"CallTimeout": {CallTimeout: d}, "WaitTimeout": {WaitTimeout: d}} {
			_, err := Open(context.Background(), c, queueName(t), cfg)
			assert.ErrorIs(t, err, ErrInvalidOption, "%s %v", name, d)
			_, err = OpenExisting(context.Background(), c, q.Name(), cfg)
			assert.ErrorIs(t, err, ErrInvalidOption, "OpenExisting, %s %v", name, d)
		}
	}
	ctx := ctxT(t, 10*time.Second)
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	got, _, err := sh(q).take(ctx, sh(q).k.highFirst, 1, time.Minute)
	require.NoError(t, err)
	assert.ErrorIs(t, got[0].Extend(ctx, 30), ErrInvalidOption)
	conn, err := Dialer(DialerConfig{KeepAlive: 5 * time.Millisecond}).CustomConn(ctx, "tcp", testAddr)
	if !assert.ErrorIs(t, err, ErrInvalidOption, "Dialer") {
		conn.Close()
	}
}

// 13a. An Ack after a successful AckBatch is a no-op, as after an Ack.
// Before the fix AckBatch did not record its outcome: ErrLeaseLost.
func TestAckAfterAckBatchIsANoOp(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{})
	enqueueIDs(ctx, t, q, "a", "b", "c")
	got, _, err := sh(q).take(ctx, sh(q).k.highFirst, 3, time.Minute)
	require.NoError(t, err)
	for _, err := range AckBatch(ctx, got...) {
		require.NoError(t, err)
	}
	for _, m := range got {
		assert.NoError(t, m.Ack(ctx))
	}
}

// 13b. DeadLetters with a count near math.MaxInt reads from start to the end.
// Before the fix start+n-1 overflowed and nothing came back.
func TestDeadLettersWithAHugeCount(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{})
	enqueueIDs(ctx, t, q, "a", "b", "c", "d")
	got, _, err := sh(q).take(ctx, sh(q).k.highFirst, 4, time.Minute)
	require.NoError(t, err)
	for _, m := range got {
		require.NoError(t, m.fail(ctx, 0, "x", failDead))
	}
	dead, err := q.DeadLetters(ctx, 2, math.MaxInt)
	require.NoError(t, err)
	assert.Len(t, dead, 2)
	dead, err = q.DeadLetters(ctx, math.MaxInt, math.MaxInt)
	require.NoError(t, err)
	assert.Len(t, dead, 0)
}

// 13c. A promoter that stops puts the sched marker back: a marker it popped
// just before Close (and never acted on) would otherwise be gone, and the
// other promoters would learn of the earlier due time only at PromoteWait.
func TestStoppingPromoterPutsTheMarkerBack(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	name := queueName(t)
	var cons atomic.Pointer[Consumer]
	ready, popped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	k := newKeySet(name, DefaultLevels)
	// Stop the consumer the moment its promoter's wait pops the marker.
	stopOnPop := clientFunc(func(ctx context.Context, a radix.Action) error {
		err := c.Do(ctx, a)
		if keys := a.Properties().Keys; err == nil && len(keys) == 1 && keys[0] == k.sched && !a.Properties().CanShareConn {
			once.Do(func() {
				<-ready
				cons.Load().stop()
				close(popped)
			})
		}
		return err
	})
	q, err := Open(ctx, stopOnPop, name, Config{})
	require.NoError(t, err)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "RPUSH", k.sched, schedMarker)))
	cn, err := q.NewConsumer(ConsumerConfig{})
	require.NoError(t, err)
	cons.Store(cn)
	close(ready)
	<-popped
	require.NoError(t, cn.Close(ctx))
	var n int
	require.NoError(t, c.Do(ctx, radix.Cmd(&n, "LLEN", k.sched)))
	assert.Equal(t, 1, n, "the marker is back for the other promoters")
}
