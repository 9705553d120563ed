package prioq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// The tests of this file come from a review of the groups (each failed on
// eaba0c0, the code it reviewed).

func enqueueGroup(t *testing.T, ctx context.Context, q *Queue, n int, prio int64, g string) {
	t.Helper()
	for i := range n {
		_, err := q.Enqueue(ctx, []byte(fmt.Sprint(g, i)), Priority(prio), Group(g))
		require.NoError(t, err)
	}
}

// A take of several from a lane holding one group's marker takes several:
// the marker it puts back leaves the lane not emptied. Before: 1 for Levels,
// and the best priority left was not reported.
func TestGroupTakeOfSeveralFromOneGroup(t *testing.T) {
	for _, l := range groupLayouts {
		t.Run(l.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			enqueueGroup(t, ctx, q, 5, l.prio, "A")
			s := sh(q)
			r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 3, lease: time.Minute, guess: true})
			require.NoError(t, err)
			assert.Len(t, r.msgs, 3)
			r, err = takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute, top: true})
			require.NoError(t, err)
			assert.Len(t, r.msgs, 1)
			assert.True(t, r.hasTop, "one message of A is left")
			assert.Equal(t, l.prio, r.top)
		})
	}
}

// A parked-groups key of the wrong type does not lose a group's marker: the
// limit is not kept while it is broken (reported), and every message comes.
// Before: the marker was popped and never parked; two messages hidden.
func TestGroupParkOfTheWrongTypeHidesNothing(t *testing.T) {
	c, ctx, q, s := groupAOfOne(t)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", s.Keys().GPark(), "x")))
	var got []*Message
	for range 3 {
		r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute})
		require.NoError(t, err)
		got = append(got, r.msgs...)
	}
	assert.Len(t, got, 3, "every message, the limit not kept while the key is broken")
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", s.Keys().GPark())))
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.Ready)
}

// An ack cut between its ZREM and the SREM of its token (its process killed
// in the pipeline) leaves a token that no lease holds; a group at its limit
// because of it is mended by the sweep. Before: the group waited forever.
func TestGroupLeakedTokenIsMendedBySweep(t *testing.T) {
	c, ctx, _, s := groupAOfOne(t)
	r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute})
	require.NoError(t, err)
	tok := r.msgs[0].token()
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZREM", s.Keys().Leases(), tok)))
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HDEL", s.Keys().Inflight(), tok)))
	r, err = takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, r.msgs, 0, "the leaked token holds the slot")
	_, _, _, err = s.Sweep(ctx, 100)
	require.NoError(t, err)
	r, err = takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, r.msgs, 1, "the sweep mended it")
	assert.Equal(t, "A1", string(r.msgs[0].Payload))
}

// A group parked with no lease left (the acking process died before it put
// the markers back) is put back by the sweep. Before: hidden until
// SetGroupLimit.
func TestGroupParkedWithoutLeasesIsMendedBySweep(t *testing.T) {
	c, ctx, q, s := groupAOfOne(t)
	r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute})
	require.NoError(t, err)
	r2, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, r2.msgs, 0, "parked")
	tok := r.msgs[0].token()
	for _, cmd := range [][]string{{"ZREM", s.Keys().Leases(), tok}, {"HDEL", s.Keys().Inflight(), tok}, {"SREM", s.Keys().GroupLeases("A"), tok}} {
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, cmd[0], cmd[1:]...)))
	}
	_, _, _, err = s.Sweep(ctx, 100)
	require.NoError(t, err)
	r, err = takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, r.msgs, 1, "the sweep put the markers back")
	gs, err := q.Groups(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, []GroupStats{{Group: "A", Ready: 1, InFlight: 1, Limit: 1}}, gs)
}

// A batch keeps its order in a lane, with and without groups (an enqueue, and
// a sweep putting expired messages back at the head). Before: the messages
// of groups went first.
func TestGroupBatchKeepsItsOrder(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	_, err := q.EnqueueBatch(ctx, []EnqueueItem{
		{Payload: []byte("plain1"), Options: []Option{Priority(1)}},
		{Payload: []byte("grp1"), Options: []Option{Priority(1), Group("A")}},
		{Payload: []byte("plain2"), Options: []Option{Priority(1)}},
	})
	require.NoError(t, err)
	s := sh(q)
	r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 3, lease: time.Minute})
	require.NoError(t, err)
	var got []string
	for _, m := range r.msgs {
		got = append(got, string(m.Payload))
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", s.Keys().Leases(), "1", m.token())))
	}
	assert.Equal(t, []string{"plain1", "grp1", "plain2"}, got)
	_, _, _, err = s.Sweep(ctx, 10)
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	assert.Equal(t, []string{"-/plain1", "A/grp1", "-/plain2"}, receiveAll(t, ctx, cons), "back at the head in their order")
}

// A queue whose name holds ":g:" cancels its messages like any other: a
// lane is not taken for a group's list. Before: the script failed half-way
// (the message gone, its caller id kept) or wrote a key outside the queue.
func TestGroupTagInAQueueName(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	for _, l := range []Layout{Levels(3), Range(-10, 10, 2)} {
		name := "rv:g:" + queueName(t)
		q, err := Open(ctx, c, name, Config{Layout: l})
		require.NoError(t, err)
		_, err = q.Enqueue(ctx, []byte("x"), Priority(1), ID("id1"))
		require.NoError(t, err)
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", "prioq:{rv", "unrelated")))
		require.NoError(t, q.Cancel(ctx, "id1"))
		var v string
		require.NoError(t, c.Do(ctx, radix.Cmd(&v, "GET", "prioq:{rv")))
		assert.Equal(t, "unrelated", v)
		_, err = q.Enqueue(ctx, []byte("y"), Priority(1), ID("id1"))
		require.NoError(t, err, "the id was released")
		assert.Empty(t, existingGroupKeys(t, c, q))
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", "prioq:{rv")))
		_, err = q.Purge(ctx)
		require.NoError(t, err)
	}
}

// A dead letter of a group whose record lost its routing (kept whole, lane
// unknown) still releases its caller id when the dead letters are purged:
// dead.lua reads the id of a version 3 envelope. Before: the id stayed
// taken (ErrDuplicate).
func TestGroupDeadLetterOfUnknownLaneReleasesItsID(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	s := sh(q)
	_, err := q.Enqueue(ctx, []byte("x"), ID("c1"), Group("g"), Priority(1))
	require.NoError(t, err)
	r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, r.msgs, 1)
	m := r.msgs[0]
	// The record's lane no longer parses: fail.lua buries it whole.
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", s.Keys().Inflight(), m.token(), "99|x|"+string(m.d.Raw()))))
	require.NoError(t, failTok(s, ctx, m.token(), 0, "boom", store.FailRetry))
	dead := onlyDeadLetter(t, q)
	assert.Equal(t, "c1", dead.ID)
	n, err := q.PurgeDead(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	_, err = q.Enqueue(ctx, []byte("x"), ID("c1"), Group("g"))
	assert.NoError(t, err, "purging the dead letters released the id")
}

// A parked group whose lane refuses its marker (a Range segment index of
// the wrong type) stays parked, its marker written nowhere, and comes back
// once the key is mended. Before: the marker was pushed into the priority's
// list and kept parked as well (two markers).
func TestGroupUnparkIntoABrokenLaneKeepsItParked(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Range(0, 99, 2)})
	s := sh(q)
	require.NoError(t, q.SetGroupLimit(ctx, "g", GroupLimit{Concurrency: 1}))
	enqueueGroup(t, ctx, q, 2, 70, "g")
	r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, r.msgs, 1)
	r2, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, r2.msgs, 0, "parked")
	seg := s.Keys().Lanes()[1]
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", seg)))
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", seg, "x")))
	require.NoError(t, r.msgs[0].Ack(ctx))
	var n int
	require.NoError(t, c.Do(ctx, radix.Cmd(&n, "LLEN", s.Keys().PrioList(70))))
	assert.Equal(t, 0, n, "no marker pushed into a lane that refuses it")
	var parked int
	require.NoError(t, c.Do(ctx, radix.Cmd(&parked, "HEXISTS", s.Keys().GPark(), "g")))
	assert.Equal(t, 1, parked, "still parked")
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", seg)))
	_, _, _, err = s.Sweep(ctx, 10)
	require.NoError(t, err)
	r, err = takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 2, lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, r.msgs, 1, "back once mended")
	assert.Equal(t, "g1", string(r.msgs[0].Payload))
}

// groupAOfOne is a Levels queue with 3 messages of group A, whose
// concurrency limit is 1.
func groupAOfOne(t *testing.T) (radix.Client, context.Context, *Queue, *store.Shard) {
	t.Helper()
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	require.NoError(t, q.SetGroupLimit(ctx, "A", GroupLimit{Concurrency: 1}))
	enqueueGroup(t, ctx, q, 3, 1, "A")
	return c, ctx, q, sh(q)
}
