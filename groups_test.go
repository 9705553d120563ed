package prioq

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// groupLayouts are the layouts groups work on: lists, with and without the
// filled index.
var groupLayouts = []struct {
	name   string
	layout Layout
	prio   int64 // a priority of the layout
}{
	{"Levels3", Levels(3), 1}, {"Levels12", Levels(12), 11}, {"Range", Range(-1000, 1000, 7), 500},
	{"Range12", Range(-1000, 1000, 12), -3},
}

// receiveAll receives one message at a time until none comes within a
// short wait, acking each, and returns "group/payload" per message ("-" for
// no group).
func receiveAll(t *testing.T, ctx context.Context, cons *Consumer) []string {
	t.Helper()
	var got []string
	for {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		m, err := cons.Receive(rctx)
		cancel()
		if err != nil {
			return got
		}
		g := m.Group
		if g == "" {
			g = "-"
		}
		got = append(got, g+"/"+string(m.Payload))
		require.NoError(t, m.Ack(ctx))
	}
}

// Within a priority the groups with work are served in turn, each first in,
// first out; messages without a group keep their place among the turns.
// Failed on the code before: there was no Group, and a loud tenant's backlog
// came first.
func TestGroupsAreServedInTurn(t *testing.T) {
	for _, l := range groupLayouts {
		t.Run(l.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			for i := range 6 {
				_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(l.prio), Group("loud"))
				require.NoError(t, err)
			}
			for _, g := range []string{"a", "b"} {
				for i := range 2 {
					_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(l.prio), Group(g))
					require.NoError(t, err)
				}
			}
			_, err := q.Enqueue(ctx, []byte("plain"), Priority(l.prio))
			require.NoError(t, err)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(11), st.Ready)
			assert.Equal(t, int64(3), st.Groups)
			gs, err := q.Groups(ctx, 0)
			require.NoError(t, err)
			assert.Equal(t, []GroupStats{{Group: "loud", Ready: 6}, {Group: "a", Ready: 2}, {Group: "b", Ready: 2}}, gs)

			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			got := receiveAll(t, ctx, cons)
			assert.Equal(t, []string{"loud/0", "a/0", "b/0", "-/plain", "loud/1", "a/1", "b/1",
				"loud/2", "loud/3", "loud/4", "loud/5"}, got)
			st, err = q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(0), st.Ready)
			assert.Equal(t, int64(0), st.Groups)
			assert.Empty(t, existingGroupKeys(t, c, q), "the groups' keys are gone once they are empty")
		})
	}
}

// existingGroupKeys lists the group keys of q that exist (counts, parks,
// groups' lists).
func existingGroupKeys(t *testing.T, c radix.Client, q *Queue) []string {
	t.Helper()
	var out []string
	for _, k := range existingKeys(t, q) {
		keys := sh(q).Keys()
		rest := strings.TrimPrefix(k, keys.Prefix()) // (the name may hold ":g:")
		if strings.Contains(rest, ":g:") || k == keys.GReady() ||
			strings.HasPrefix(k, keys.GroupLeases("")) || k == keys.GPark() {
			out = append(out, k)
		}
	}
	return out
}

// A group's concurrency limit holds across consumers: its next message
// waits while the limit is in flight, the other groups go on meanwhile, and
// the slot comes back when a lease ends (ack, retry, expiry), never before.
func TestGroupConcurrencyLimit(t *testing.T) {
	for _, l := range groupLayouts {
		t.Run(l.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			require.NoError(t, q.SetGroupLimit(ctx, "", GroupLimit{Concurrency: 1}))
			for i := range 3 {
				for _, g := range []string{"a", "b"} {
					_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(l.prio), Group(g))
					require.NoError(t, err)
				}
			}
			// Two consumers take the first two; then one consumer (another
			// would keep in its buffer what a take of its own leased).
			c1 := newConsumer(t, q, ConsumerConfig{NoPromoter: true, BlockTimeout: 100 * time.Millisecond})
			c2 := newConsumer(t, q, ConsumerConfig{NoPromoter: true, BlockTimeout: 100 * time.Millisecond})
			a0, err := c1.Receive(ctx)
			require.NoError(t, err)
			b0, err := c2.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, "a/0 b/0", a0.Group+"/"+string(a0.Payload)+" "+b0.Group+"/"+string(b0.Payload))
			// Both groups at their limit: nothing more, from any consumer.
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err = c1.Receive(short)
			cancel()
			require.Error(t, err, "nothing while both groups are at their limit")
			gs, err := q.Groups(ctx, 0)
			require.NoError(t, err)
			assert.Equal(t, []GroupStats{{Group: "a", Ready: 2, InFlight: 1, Parked: true, Limit: 1},
				{Group: "b", Ready: 2, InFlight: 1, Parked: true, Limit: 1}}, gs)

			// An ack gives a's slot back: a's next comes, b stays held.
			require.NoError(t, c2.Close(ctx))
			require.NoError(t, a0.Ack(ctx))
			a1, err := c1.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, "a/1", a1.Group+"/"+string(a1.Payload))
			// A retry gives b's back (and b/0 goes to its group's tail).
			require.NoError(t, failTok(sh(q), ctx, b0.token(), 0, "again", store.FailRetry))
			b1, err := c1.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, "b/1", b1.Group+"/"+string(b1.Payload))
			// An expired lease gives the slot back only when swept.
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", sh(q).Keys().Leases(), "1", a1.token())))
			short, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
			_, err = c1.Receive(short)
			cancel()
			require.Error(t, err, "a's slot is held until its lease is swept")
			back, _, _, err := sh(q).Sweep(ctx, 10)
			require.NoError(t, err)
			require.Equal(t, 1, back)
			a1again, err := c1.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, "a/1", a1again.Group+"/"+string(a1again.Payload), "the expired one first, at its group's head")
			assert.Equal(t, 2, a1again.Attempts)

			// Raising the limit lets the parked group go at once.
			require.NoError(t, q.SetGroupLimit(ctx, "b", GroupLimit{Concurrency: 5}))
			var rest []string
			for range 2 {
				m, err := c1.Receive(ctx)
				require.NoError(t, err)
				rest = append(rest, m.Group+"/"+string(m.Payload))
			}
			assert.Equal(t, []string{"b/2", "b/0"}, rest)
		})
	}
}

// Bad group input is refused before anything is written.
func TestGroupBadInput(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{})
	for _, g := range []string{"", "a b", strings.Repeat("g", 129), "é"} {
		_, err := q.Enqueue(ctx, []byte("x"), Group(g))
		assert.ErrorIs(t, err, ErrInvalidOption, "%q", g)
	}
	_, err := q.Enqueue(ctx, []byte("x"), Group(strings.Repeat("g", 128)))
	require.NoError(t, err, "128 bytes is the longest group")
	amo := openQueue(t, c, Config{Mode: AtMostOnce})
	_, err = amo.Enqueue(ctx, []byte("x"), Group("g"))
	assert.ErrorIs(t, err, ErrWrongMode)
	assert.ErrorIs(t, amo.SetGroupLimit(ctx, "g", GroupLimit{Concurrency: 1}), ErrWrongMode)
	sorted := openQueue(t, c, Config{Layout: RangeSorted(0, 9, 2)})
	_, err = sorted.Enqueue(ctx, []byte("x"), Group("g"))
	assert.ErrorIs(t, err, ErrInvalidOption)
	assert.Empty(t, existingKeys(t, amo))
	assert.Empty(t, existingKeys(t, sorted))
	assert.ErrorIs(t, q.SetGroupLimit(ctx, "g", GroupLimit{Concurrency: -1}), ErrInvalidOption)
}

// A message of a group keeps its group through every path that writes it
// back (promotion of a delayed one, retry, expiry, release, requeue of a
// dead letter) and the group's counts stay exact; Cancel finds it ready or
// parked; Purge removes the groups' lists and counts but not what is in
// flight.
func TestGroupMessagesThroughEveryPath(t *testing.T) {
	for _, l := range groupLayouts {
		t.Run(l.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			s := sh(q)
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, BlockTimeout: 100 * time.Millisecond})
			counts := func() string {
				gs, err := q.Groups(ctx, 0)
				require.NoError(t, err)
				var b strings.Builder
				for _, g := range gs {
					fmt.Fprintf(&b, "%s:%d/%d ", g.Group, g.Ready, g.InFlight)
				}
				return strings.TrimSpace(b.String())
			}
			one := func() *Message {
				t.Helper()
				m, err := cons.Receive(ctx)
				require.NoError(t, err)
				require.Equal(t, "g", m.Group)
				return m
			}
			// Delayed, then promoted.
			_, err := q.Enqueue(ctx, []byte("d"), Priority(l.prio), Group("g"), Delay(time.Hour))
			require.NoError(t, err)
			assert.Equal(t, "", counts())
			_, _, _, err = s.PromoteAt(ctx, fmt.Sprint(time.Now().Add(2*time.Hour).UnixMilli()))
			require.NoError(t, err)
			assert.Equal(t, "g:1/0", counts())
			m := one()
			assert.Equal(t, "g:0/1", counts())
			// Retried at once, expired and swept, released, dead and requeued.
			require.NoError(t, failTok(s, ctx, m.token(), 0, "again", store.FailRetry))
			assert.Equal(t, "g:1/0", counts())
			m = one()
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", s.Keys().Leases(), "1", m.token())))
			_, _, _, err = s.Sweep(ctx, 10)
			require.NoError(t, err)
			assert.Equal(t, "g:1/0", counts())
			m = one()
			_, err = s.Release(ctx, []string{m.token()})
			require.NoError(t, err)
			assert.Equal(t, "g:1/0", counts())
			m = one()
			require.NoError(t, failTok(s, ctx, m.token(), 0, "dead", store.FailDead))
			assert.Equal(t, "", counts())
			require.NoError(t, q.RequeueDead(ctx, m.ID))
			assert.Equal(t, "g:1/0", counts())
			m = one()
			assert.Equal(t, "d", string(m.Payload))
			require.NoError(t, m.Ack(ctx))
			assert.Equal(t, "", counts())

			// Cancel: ready (its marker goes with the group's last message),
			// and parked at the group's limit.
			ids := make([]string, 3)
			for i := range ids {
				ids[i], err = q.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(l.prio), Group("g"))
				require.NoError(t, err)
			}
			require.NoError(t, q.Cancel(ctx, ids[1]))
			assert.Equal(t, "g:2/0", counts())
			require.NoError(t, q.SetGroupLimit(ctx, "g", GroupLimit{Concurrency: 1}))
			m = one()
			assert.Equal(t, "0", string(m.Payload))
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err = cons.Receive(short) // parks the group's marker
			cancel()
			require.Error(t, err)
			require.NoError(t, q.Cancel(ctx, ids[2]))
			assert.Equal(t, "g:0/1", counts())
			var parked int
			require.NoError(t, c.Do(ctx, radix.Cmd(&parked, "HLEN", s.Keys().GPark())))
			assert.Equal(t, 0, parked, "the park went with the group's last message")
			require.NoError(t, m.Ack(ctx))
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(0), st.Ready)

			// Purge: ready and parked groups' messages go, in flight stays.
			for i := range 3 {
				_, err = q.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(l.prio), Group("g"))
				require.NoError(t, err)
				_, err = q.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(l.prio), Group("h"), ID(fmt.Sprintf("h-%d", i)))
				require.NoError(t, err)
			}
			held := one()
			short, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
			for { // drain h, parking g
				m, err := cons.Receive(short)
				if err != nil {
					break
				}
				require.Equal(t, "h", m.Group, "g is at its limit")
				require.NoError(t, m.Ack(ctx))
				break
			}
			cancel()
			n, err := q.Purge(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(4), n, "g's 2 and h's 2")
			assert.Equal(t, "g:0/1", counts())
			st, err = q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(0), st.Ready)
			assert.Equal(t, int64(1), st.InFlight)
			assert.Empty(t, liveIDs(t, q), "the purged caller ids are released")
			require.NoError(t, held.Ack(ctx))
			assert.Empty(t, existingGroupKeys(t, c, q))
		})
	}
}

// In a queue of several shards a group lives in the shard its key hashes
// to: its messages, lists and counts are all there, so its turns and its
// limit are exact; a sharded consumer serves every group.
func TestGroupsInAShardedQueue(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(3), Shards: 3})
	require.NoError(t, q.SetGroupLimit(ctx, "", GroupLimit{Concurrency: 1}))
	groups := []string{"a", "b", "c", "d", "e", "f"}
	for i := range 3 {
		for _, g := range groups {
			_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(1), Group(g))
			require.NoError(t, err)
		}
	}
	_, err := q.Enqueue(ctx, []byte("x"), Group("a"), OrderingKey("k"))
	require.ErrorIs(t, err, ErrInvalidOption)
	for _, g := range groups {
		s := q.shards[q.hashShard(g)]
		var n int
		require.NoError(t, c.Do(ctx, radix.Cmd(&n, "HGET", s.Keys().GReady(), g)))
		assert.Equal(t, 3, n, "group %s lives in shard %d", g, q.hashShard(g))
	}
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, BlockTimeout: 100 * time.Millisecond})
	held := map[string]*Message{}
	next := map[string]int{}
	for len(held) < len(groups) {
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		require.True(t, held[m.Group] == nil, "a second message of %s while one is in flight", m.Group)
		assert.Equal(t, fmt.Sprint(next[m.Group]), string(m.Payload), "first in, first out in %s", m.Group)
		held[m.Group] = m
		next[m.Group]++
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cons.Receive(short)
	cancel()
	require.Error(t, err, "every group at its limit")
	for round := 0; round < 2; round++ {
		for _, g := range groups {
			require.NoError(t, held[g].Ack(ctx))
			delete(held, g)
		}
		for len(held) < len(groups) {
			m, err := cons.Receive(ctx)
			require.NoError(t, err)
			require.True(t, held[m.Group] == nil, "a second message of %s while one is in flight", m.Group)
			assert.Equal(t, fmt.Sprint(next[m.Group]), string(m.Payload))
			held[m.Group] = m
			next[m.Group]++
		}
	}
	for _, m := range held {
		require.NoError(t, m.Ack(ctx))
	}
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.Ready+st.InFlight)
}

// A take that fails after it resolved a group's marker (the in-flight hash
// of the wrong type) puts everything back: the group's messages in their
// order, its one marker, its counts; the next take serves them.
func TestGroupTakeUndo(t *testing.T) {
	for _, l := range groupLayouts {
		t.Run(l.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			s := sh(q)
			for i := range 3 {
				_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(l.prio), Group("g"))
				require.NoError(t, err)
			}
			_, err := q.Enqueue(ctx, []byte("h"), Priority(l.prio), Group("h"))
			require.NoError(t, err)
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", s.Keys().Inflight(), "not a hash")))
			for _, guess := range []bool{false, true} {
				_, err = takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 3, lease: time.Minute, guess: guess})
				require.ErrorContains(t, err, "WRONGTYPE")
			}
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", s.Keys().Inflight())))
			gs, err := q.Groups(ctx, 0)
			require.NoError(t, err)
			assert.Equal(t, []GroupStats{{Group: "g", Ready: 3}, {Group: "h", Ready: 1}}, gs)
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			assert.Equal(t, []string{"g/0", "h/h", "g/1", "g/2"}, receiveAll(t, ctx, cons))
			assert.Empty(t, existingGroupKeys(t, c, q))
		})
	}
}
