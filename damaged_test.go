package prioq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

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
	got, _, err := sh(q).take(ctx, sh(q).k.highFirst, 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, got, 1)

	// The in-flight record becomes a bare envelope: a valid message, but
	// without the "lane|score|" that says where it belongs. A fixed enqueue
	// time keeps '|' out of its bytes.
	env := (&envelope{ID: "g", CallerID: true, Priority: 1, EnqueuedMs: 1_700_000_000_000, Payload: []byte("x")}).encode()
	require.False(t, strings.Contains(string(env), "|"))
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", sh(q).k.inflight, got[0].token, string(env))))
	require.NoError(t, failTok(sh(q), ctx, got[0].token, 0, "boom", "retry"))

	var before []string
	require.NoError(t, c.Do(ctx, radix.Cmd(&before, "LRANGE", sh(q).k.dead, "0", "-1")))
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
	require.NoError(t, c.Do(ctx, radix.Cmd(&after, "LRANGE", sh(q).k.dead, "0", "-1")))
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
	require.NoError(t, sh(q).c.Do(ctx, radix.Cmd(&rec, "HGET", sh(q).k.dstore, id)))
	require.NotEmpty(t, rec)
	require.NoError(t, sh(q).c.Do(ctx, radix.Cmd(nil, "HSET", sh(q).k.dstore, id, edit(rec))))
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
	moved, _, _, err := sh(q).promote(ctx)
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
	got, _, err := sh(q).take(ctx, sh(q).k.highFirst, 1, time.Minute)
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
			_, _, _, err = sh(q).promote(ctx)
			require.NoError(t, err)

			dead, err := q.DeadLetters(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, dead, 1)
			assert.Equal(t, "p|q", dead[0].ID)
			assert.Equal(t, "x", string(dead[0].Payload), "the message inside the damaged record")
			assert.NotEmpty(t, dead[0].Raw, "the damaged record, byte for byte")
			require.ErrorIs(t, q.RequeueDead(ctx, "p|q"), ErrCorrupt)

			n, err := q.PurgeDead(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(1), n)
			_, err = q.Enqueue(ctx, []byte("again"), ID("p|q"))
			assert.NoError(t, err, "purging released the caller id")
		})
	}
}
