package prioq

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Records whose routing ("lane|score|" in front of a stored message) no
// longer parses: a bug of an older version, a hand edit, a bit flip. The
// scripts must neither send such a message somewhere it did not come from
// nor leave pieces of it behind.

// A message buried because its in-flight record lost its routing does not
// say which lane it came from. Requeueing it must not guess lane 0 (before
// the fix, a Levels queue's dead.lua read the burial's placeholder "0||" as
// lane 0 and requeued it there, with its bytes rewritten); it stays, byte for
// byte, until purged.
func TestDeadLetterOfUnknownLaneIsNotRequeued(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{Layout: Levels(2)})
	_, err := q.Enqueue(ctx, []byte("x"), ID("g"), Priority(1))
	require.NoError(t, err)
	got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, got, 1)

	// The in-flight record becomes a bare envelope: a valid message, but
	// without the "lane|score|" that says where it belongs. A fixed enqueue
	// time keeps '|' out of its bytes.
	env := (&store.Envelope{ID: "g", CallerID: true, Priority: 1, EnqueuedMs: 1_700_000_000_000, Payload: []byte("x")}).Encode()
	require.False(t, strings.Contains(string(env), "|"))
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", sh(q).Keys().Inflight(), got[0].token(), string(env))))
	require.NoError(t, failTok(sh(q), ctx, got[0].token(), 0, "boom", "retry"))

	var before []string
	require.NoError(t, c.Do(ctx, radix.Cmd(&before, "LRANGE", sh(q).Keys().Dead(), "0", "-1")))
	require.Len(t, before, 1)
	require.True(t, strings.HasSuffix(before[0], string(env)), "the burial keeps the record's bytes")

	err = q.RequeueDead(ctx, "g")
	require.ErrorIs(t, err, ErrCorrupt, "RequeueDead refuses a dead letter of unknown lane")
	n, err := q.RequeueAllDead(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), n, "RequeueAllDead skips it")
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 0}, st.Lanes, "nothing was requeued")
	var after []string
	require.NoError(t, c.Do(ctx, radix.Cmd(&after, "LRANGE", sh(q).Keys().Dead(), "0", "-1")))
	assert.Equal(t, before, after, "the dead letter stays byte for byte")

	n, err = q.PurgeDead(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	_, err = q.Enqueue(ctx, []byte("again"), ID("g"))
	assert.NoError(t, err, "purging released the caller id")
}

// damageDelayed rewrites the stored record of the delayed message id with
// edit (its old value in, the new one out).
func damageDelayed(t *testing.T, q *Queue, id string, edit func(string) string) {
	t.Helper()
	ctx := context.Background()
	var rec string
	require.NoError(t, sh(q).Client().Do(ctx, radix.Cmd(&rec, "HGET", sh(q).Keys().DStore(), id)))
	require.NotEmpty(t, rec)
	require.NoError(t, sh(q).Client().Do(ctx, radix.Cmd(nil, "HSET", sh(q).Keys().DStore(), id, edit(rec))))
}

// Cancel of a delayed message whose record does not parse removes its member
// from the delayed set too. Before the fix the member stayed: it counted in
// Stats.Delayed, and when the same id was enqueued again, promotion at the
// old member's due time found the new record by id and delivered the new
// message early.
func TestCancelOfDamagedDelayedRecordRemovesItsMember(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(2)})
	for _, id := range []string{"bad-lane", "no-routing"} {
		_, err := q.Enqueue(ctx, []byte("x"), ID(id), Delay(300*time.Millisecond))
		require.NoError(t, err)
	}
	damageDelayed(t, q, "bad-lane", func(r string) string { return "9" + r[strings.Index(r, "|"):] })
	damageDelayed(t, q, "no-routing", func(string) string { return "garbage" })

	require.NoError(t, q.Cancel(ctx, "bad-lane"))
	require.NoError(t, q.Cancel(ctx, "no-routing"))
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.Delayed, "no member of a cancelled message is left")

	_, err = q.Enqueue(ctx, []byte("later"), ID("bad-lane"), Delay(time.Hour))
	require.NoError(t, err)
	time.Sleep(400 * time.Millisecond) // the cancelled message's due time passes
	moved, _, _, err := sh(q).Promote(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, moved, "the new message is not promoted at the cancelled one's due time")
	st, err = q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.Ready)
	assert.Equal(t, int64(1), st.Delayed)
}

// Purge releases the caller id of a delayed message whose record does not
// parse: the record is deleted with the rest, and the id, which the dstore
// key says is this message's, must not stay taken (before the fix, enqueueing
// it again failed with ErrDuplicate until the ids set was cleaned by hand).
func TestPurgeReleasesIDOfDamagedDelayedRecord(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(2)})
	_, err := q.Enqueue(ctx, []byte("x"), ID("p"), Delay(time.Hour))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("y"), ID("kept-in-flight"))
	require.NoError(t, err)
	got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, got, 1)
	damageDelayed(t, q, "p", func(r string) string { return "9" + r[strings.Index(r, "|"):] })

	n, err := q.Purge(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	_, err = q.Enqueue(ctx, []byte("again"), ID("p"))
	assert.NoError(t, err, "the purged message's id is free")
	_, err = q.Enqueue(ctx, []byte("dup"), ID("kept-in-flight"))
	assert.ErrorIs(t, err, ErrDuplicate, "an in-flight message keeps its id")
}

// A delayed record whose lane does not parse is buried by the promotion with
// its routing in front of the message. Its dead letter must still say which
// message it was: DeadLetters shows the id, RequeueDead refuses it with
// ErrCorrupt (not ErrNotFound), and purging it releases its caller id. Before
// the fix the id was read at the wrong offset: no id, ErrNotFound, and the
// caller id stayed taken after PurgeDead.
func TestDeadLetterOfDamagedDelayedRecordKeepsItsID(t *testing.T) {
	for _, layout := range []Layout{Levels(2), Range(0, 9, 2)} {
		t.Run(layout.String(), func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, newClient(t), Config{Layout: layout})
			_, err := q.Enqueue(ctx, []byte("x"), ID("p|q"), Delay(50*time.Millisecond))
			require.NoError(t, err)
			damageDelayed(t, q, "p|q", func(r string) string { return "9" + r[strings.Index(r, "|"):] })
			time.Sleep(100 * time.Millisecond)
			_, _, _, err = sh(q).Promote(ctx)
			require.NoError(t, err)

			dead := onlyDeadLetter(t, q)
			assert.Equal(t, "p|q", dead.ID)
			assert.Equal(t, "x", string(dead.Payload), "the message inside the damaged record")
			assert.NotEmpty(t, dead.Raw, "the damaged record, byte for byte")
			require.ErrorIs(t, q.RequeueDead(ctx, "p|q"), ErrCorrupt)

			n, err := q.PurgeDead(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(1), n)
			_, err = q.Enqueue(ctx, []byte("again"), ID("p|q"))
			assert.NoError(t, err, "purging released the caller id")
		})
	}
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

// A Range record whose score does not fit a double (digits only) must go
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
		got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 4, 20*time.Millisecond)
		require.NoError(t, err)
		require.Len(t, got, 4)
		var rec string
		require.NoError(t, c.Do(ctx, radix.Cmd(&rec, "HGET", sh(q).Keys().Inflight(), got[1].token())))
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", sh(q).Keys().Inflight(), got[1].token(), damageScore(rec))))
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
		_, _, _, err := sh(q).Sweep(ctx, 100)
		require.NoError(t, err)
		ready, inflight, dead := counts(t, q)
		assert.Equal(t, []int64{3, 0, 1}, []int64{ready, inflight, dead})
	})
	for _, op := range []string{store.FailRetry, store.FailDead} {
		t.Run("fail "+op, func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: lay})
			got := inFlight(t, q)
			for _, m := range got {
				_, err := sh(q).Fail(ctx, m.token(), 0, "x", op)
				require.NoError(t, err)
			}
			ready, inflight, dead := counts(t, q)
			if op == store.FailRetry {
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
		_ = cons.fetcher.GiveBack(ctx, deliveriesOf(got))
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
		moved, _, _, err := sh(q).PromoteAt(ctx, fmtInt(time.Now().Add(time.Hour).UnixMilli()))
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
		got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 4, time.Minute)
		require.NoError(t, err)
		for _, m := range got {
			require.NoError(t, m.fail(ctx, 0, "x", store.FailDead))
		}
		var recs []string
		require.NoError(t, c.Do(ctx, radix.Cmd(&recs, "LRANGE", sh(q).Keys().Dead(), "0", "-1")))
		require.Len(t, recs, 4)
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "LSET", sh(q).Keys().Dead(), "1", damageScore(recs[1]))))
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

// A lane key of the wrong type must not stop takes from the other lanes,
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
				require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", sh(q).Keys().Lanes()[2], "not a lane")))
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
				// (AtMostOnce on a Range queue of format 4 takes with
				// take.lua, which reports them like an AtLeastOnce take.)
				if m.mode == AtLeastOnce || sh(q).Lists() {
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
			got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 2, 10*time.Millisecond)
			require.NoError(t, err)
			require.Len(t, got, 2)
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", sh(q).Keys().Lanes()[2], "not a lane")))
			time.Sleep(30 * time.Millisecond)
			_, _, _, err = sh(q).Sweep(ctx, 100)
			require.NoError(t, err)
			assert.Equal(t, []string{"a"}, liveIDs(t, q))
			dead := onlyDeadLetter(t, q)
			assert.Equal(t, "hi", dead.ID)

			n, err := q.RequeueAllDead(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(0), n, "its lane is still broken: it stays")
			err = q.RequeueDead(ctx, "hi")
			assert.ErrorIs(t, err, ErrCorrupt)
			assert.ErrorContains(t, err, "wrong type")
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", sh(q).Keys().Lanes()[2])))
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
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", sh(q).Keys().Lanes()[2], "not a lane")))
			moved, _, _, err := sh(q).PromoteAt(ctx, fmtInt(time.Now().Add(time.Hour).UnixMilli()))
			require.NoError(t, err)
			assert.Equal(t, 1, moved)
			assert.Equal(t, []string{"lo"}, liveIDs(t, q))
			dead := onlyDeadLetter(t, q)
			assert.Equal(t, "hi", dead.ID)
		})
	}
}
