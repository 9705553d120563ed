package prioq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// findLayouts are the layouts Message must search: Levels, Levels with the
// filled index (more than 8 lanes), Range (a list per priority), Range with
// the filled index, and Range of format 3 (messages as segment members).
var findLayouts = []struct {
	name   string
	layout Layout
	prio   int64 // a priority of the layout
}{
	{"Levels3", Levels(3), 1}, {"Levels12", Levels(12), 11},
	{"Range", Range(-1000, 1000, 4), 500}, {"Range12", Range(-1200, 1200, 12), 50},
	{"RangeSorted", RangeSorted(-1000, 1000, 4), -500},
}

// Each state is found with what it says: a ready message's lane and place,
// a delayed one's due time, one in flight's lease (its token that of the
// delivery), a dead one's reason; an id that is nowhere is ErrNotFound, and
// an invalid one ErrInvalidID.
func TestMessageFindsEachState(t *testing.T) {
	for _, l := range findLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, newClient(t), Config{Layout: l.layout})
			enqueueIDs(ctx, t, q) // (none: the queue exists)
			for _, id := range []string{"r0", "r1", "r2", "taken", "dies"} {
				_, err := q.Enqueue(ctx, []byte("payload of "+id), ID(id), Priority(l.prio), Headers(map[string]string{"k": id}))
				require.NoError(t, err)
			}
			got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 2, time.Minute)
			require.NoError(t, err)
			require.Len(t, got, 2)
			// r0 and r1 are taken; r1 dies, r0 is "taken"'s lease below.
			require.NoError(t, failTok(sh(q), ctx, got[1].token(), 0, "it broke", store.FailDead))
			before := time.Now()
			_, err = q.Enqueue(ctx, []byte("later"), ID("later"), Priority(l.prio), Delay(time.Hour))
			require.NoError(t, err)

			st, err := q.Message(ctx, "r2")
			require.NoError(t, err)
			assert.Equal(t, MessageReady, st.State)
			assert.Equal(t, "r2", st.ID)
			assert.Equal(t, l.prio, st.Priority)
			assert.Equal(t, "payload of r2", string(st.Payload))
			assert.Equal(t, map[string]string{"k": "r2"}, st.Headers)
			assert.Equal(t, laneOfPrio(q, l.prio), st.Lane)
			assert.Equal(t, 0, st.Ahead, "r0 and r1 left: r2 is next")
			st, err = q.Message(ctx, "dies")
			require.NoError(t, err)
			assert.Equal(t, 2, st.Ahead, "r2 and taken before it")

			st, err = q.Message(ctx, "later")
			require.NoError(t, err)
			assert.Equal(t, MessageDelayed, st.State)
			within(t, before.Add(time.Hour), st.Due, 5*time.Second)

			st, err = q.Message(ctx, "r0")
			require.NoError(t, err)
			assert.Equal(t, MessageInFlight, st.State)
			assert.Equal(t, got[0].token(), st.LeaseToken)
			within(t, got[0].LeaseDeadline(), st.LeaseDeadline, time.Second)
			within(t, got[0].TakenAt(), st.TakenAt, time.Millisecond)
			assert.Equal(t, "payload of r0", string(st.Payload))

			st, err = q.Message(ctx, "r1")
			require.NoError(t, err)
			assert.Equal(t, MessageDead, st.State)
			assert.Equal(t, "it broke", st.Reason)
			assert.Equal(t, 1, st.Attempts)
			within(t, time.Now(), st.DiedAt, 5*time.Second)

			_, err = q.Message(ctx, "nowhere")
			assert.ErrorIs(t, err, ErrNotFound)
			_, err = q.Message(ctx, "bad id")
			assert.ErrorIs(t, err, ErrInvalidID)
		})
	}
}

// Grouped messages are found in their group's list, behind the group's
// marker in a lane, or parked at the group's limit (the marker out of the
// lanes); and in a group whose marker the search did not read (moved to a
// lane's tail by a take during the search: here, taken out by hand).
func TestMessageFindsGroupedMessages(t *testing.T) {
	for _, l := range groupLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			c := newClient(t)
			q := openQueue(t, c, Config{Layout: l.layout})
			require.NoError(t, q.SetGroupLimit(ctx, "a", GroupLimit{Concurrency: 1}))
			for i := range 3 {
				for _, g := range []string{"a", "b", "c"} {
					_, err := q.Enqueue(ctx, []byte("x"), ID(fmt.Sprint(g, i)), Priority(l.prio), Group(g))
					require.NoError(t, err)
				}
			}
			got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, "a0", got[0].ID)
			// b0 and c0, then a's marker comes first at a's limit: a is
			// parked, b1 comes instead.
			for _, want := range []string{"b0", "c0", "b1"} {
				more, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
				require.NoError(t, err)
				require.Len(t, more, 1)
				require.Equal(t, want, more[0].ID)
			}
			gs, err := q.Groups(ctx, 0)
			require.NoError(t, err)
			require.True(t, gs[0].Group == "a" && gs[0].Parked, "a is parked: %+v", gs)

			st, err := q.Message(ctx, "a2")
			require.NoError(t, err)
			assert.Equal(t, MessageReady, st.State)
			assert.True(t, st.Parked)
			assert.Equal(t, "a", st.Group)
			assert.Equal(t, 1, st.Ahead, "a1 before it in a's list")
			st, err = q.Message(ctx, "c2")
			require.NoError(t, err)
			assert.Equal(t, MessageReady, st.State)
			assert.False(t, st.Parked)
			assert.Equal(t, 1, st.Ahead, "c1 before it in c's list")
			st, err = q.Message(ctx, "a0")
			require.NoError(t, err)
			assert.Equal(t, MessageInFlight, st.State)
			assert.Equal(t, "a", st.Group)
			assert.Equal(t, got[0].token(), st.LeaseToken)

			// c's marker gone from its list: only gready says c waits.
			list := sh(q).Keys().Lanes()[laneOfPrio(q, l.prio)]
			if q.layout().IsRange() {
				list = sh(q).Keys().PrioList(l.prio)
			}
			var removed int
			require.NoError(t, c.Do(ctx, radix.Cmd(&removed, "LREM", list, "1", "\x00c")))
			require.Equal(t, 1, removed)
			st, err = q.Message(ctx, "c1")
			require.NoError(t, err)
			assert.Equal(t, MessageReady, st.State)
			assert.Equal(t, "c", st.Group)
			assert.Equal(t, laneOfPrio(q, l.prio), st.Lane)
		})
	}
}

// laneOfPrio is the lane of priority p in q.
func laneOfPrio(q *Queue, p int64) int {
	n, err := q.layout().LaneOf(p)
	if err != nil {
		panic(err)
	}
	return n
}

// Records that do not decode beside the message, even holding its id, and
// keys of the wrong type are passed by: the message is still found.
func TestMessagePassesDamageBy(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	for _, id := range []string{"dead", "ready"} {
		_, err := q.Enqueue(ctx, []byte("x"), ID(id), Priority(1))
		require.NoError(t, err)
	}
	got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
	require.NoError(t, err)
	require.NoError(t, failTok(sh(q), ctx, got[0].token(), 0, "why", store.FailDead))
	_, err = q.Enqueue(ctx, []byte("x"), ID("late"), Priority(0), Delay(time.Hour))
	require.NoError(t, err)
	k := sh(q).Keys()
	// Garbage holding the ids in the lane, the dead letters, the in-flight
	// records and the delayed records; lane 2 a string.
	for _, cmd := range []radix.Action{
		radix.Cmd(nil, "RPUSH", k.Lanes()[1], "junk ready dead", "\x01\x00junk ready"),
		radix.Cmd(nil, "RPUSH", k.Dead(), "1|2|x|dead", "junk dead"),
		radix.Cmd(nil, "HSET", k.Inflight(), "0000000000000-token", "0|0|ready dead late"),
		radix.Cmd(nil, "HSET", k.DStore(), "ready", "0|0|ready garbage"),
		radix.Cmd(nil, "SET", k.Lanes()[2], "a string"),
	} {
		require.NoError(t, c.Do(ctx, cmd))
	}
	for id, want := range map[string]MessageState{"ready": MessageReady, "dead": MessageDead, "late": MessageDelayed} {
		st, err := q.Message(ctx, id)
		require.NoError(t, err, id)
		assert.Equal(t, want, st.State, id)
		assert.Equal(t, id, st.ID)
	}
	_, err = q.Message(ctx, "junk")
	assert.ErrorIs(t, err, ErrNotFound, "a record that does not decode is no message")
}

// A queue of several shards: generated ids are found on the shard they
// name, caller ids on any.
func TestMessageOnShards(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(2), Shards: 3})
	var ids []string
	for i := range 12 {
		id, err := q.Enqueue(ctx, []byte("x"), OrderingKey(fmt.Sprint(i)))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	shards := map[int]bool{}
	for _, id := range ids {
		st, err := q.Message(ctx, id)
		require.NoError(t, err, id)
		assert.Equal(t, MessageReady, st.State)
		assert.Equal(t, q.shardOf(id), st.Shard)
		shards[st.Shard] = true
	}
	assert.Len(t, shards, 3, "messages on every shard")
	_, err := q.Enqueue(ctx, []byte("x"), ID("mine"), Delay(time.Hour))
	require.NoError(t, err)
	st, err := q.Message(ctx, "mine")
	require.NoError(t, err)
	assert.Equal(t, MessageDelayed, st.State)
	assert.Equal(t, q.shardOf("mine"), st.Shard)
	_, err = q.Message(ctx, "other")
	assert.ErrorIs(t, err, ErrNotFound)

	// In flight and dead on their shards.
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	taken, err := cons.ReceiveBatch(ctx, 2)
	require.NoError(t, err)
	require.NotEmpty(t, taken)
	st, err = q.Message(ctx, taken[0].ID)
	require.NoError(t, err)
	assert.Equal(t, MessageInFlight, st.State)
	assert.Equal(t, taken[0].token(), st.LeaseToken)
	assert.Equal(t, q.shardOf(taken[0].ID), st.Shard)
	s := q.shards[q.shardOf(taken[0].ID)]
	require.NoError(t, failTok(s, ctx, taken[0].token(), 0, "gone", store.FailDead))
	st, err = q.Message(ctx, taken[0].ID)
	require.NoError(t, err)
	assert.Equal(t, MessageDead, st.State)
	assert.Equal(t, "gone", st.Reason)
}

// The in-flight records, the dead letters, the delayed records, the
// parked groups and gready of the wrong type are passed by: the search
// ends, ErrNotFound, no error.
func TestMessagePassesWrongTypesBy(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	for _, l := range []struct {
		layout Layout
		prio   int64 // in lane 1
	}{{Levels(2), 1}, {Range(0, 10, 2), 9}} {
		q := openQueue(t, c, Config{Layout: l.layout})
		_, err := q.Enqueue(ctx, []byte("x"), ID("here"), Priority(l.prio))
		require.NoError(t, err)
		k := sh(q).Keys()
		for _, key := range []string{k.Inflight(), k.Dead(), k.DStore(), k.GPark(), k.GReady(), k.Lanes()[0]} {
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", key, "a string")))
		}
		if q.layout().IsRange() {
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "RPUSH", k.PrioList(0), "x")))
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", k.Lanes()[1], "-7", "7")))
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", k.PrioList(7), "a string")))
		}
		_, err = q.Message(ctx, "nowhere")
		assert.ErrorIs(t, err, ErrNotFound, l.layout.String())
		st, err := q.Message(ctx, "here")
		require.NoError(t, err, l.layout.String())
		assert.Equal(t, MessageReady, st.State)
	}
}

// While consumers take and ack, every message not yet handled is found,
// ready or in flight, and no look fails: a message handled (its handler
// finished: it is acked after) may be reported gone. The looks ask for any message, for the one
// taken last (likely in flight), and for one about to be taken (ready when
// the look starts, taken while it reads the lanes: then found in flight).
func TestMessageWhileConsumersTakeAndAck(t *testing.T) {
	for _, l := range []struct {
		name   string
		layout Layout
		group  bool
	}{{"Levels", Levels(3), false}, {"Range", Range(0, 100, 4), false}, {"Groups", Levels(3), true}} {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			q := openQueue(t, newClient(t), Config{Layout: l.layout})
			const n = 3000
			var items []EnqueueItem
			for i := range n {
				opts := []Option{ID(fmt.Sprint("m", i)), Priority(1)} // served in order
				if l.group {
					opts = append(opts, Group(fmt.Sprint("g", i%5)))
				}
				items = append(items, EnqueueItem{Payload: []byte("x"), Options: opts})
			}
			for i := 0; i < n; i += MaxBatch {
				_, err := q.EnqueueBatch(ctx, items[i:min(i+MaxBatch, n)])
				require.NoError(t, err)
			}
			var finished sync.Map
			var acked, started atomic.Int64
			var latest atomic.Value // the id of the handler started last
			latest.Store("m0")
			cons := newConsumer(t, q, ConsumerConfig{Concurrency: 16, NoPromoter: true})
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			// m100's handler waits until a look found it in flight: one look
			// at least sees that state, however slow the search is.
			held, hold := make(chan struct{}), make(chan struct{})
			go func() {
				done <- cons.Run(runCtx, func(_ context.Context, m *Message) error {
					latest.Store(m.ID)
					started.Add(1)
					if m.ID == "m100" {
						close(held)
						select {
						case <-hold:
						case <-time.After(20 * time.Second):
						}
					}
					time.Sleep(5 * time.Millisecond)
					finished.Store(m.ID, true)
					acked.Add(1)
					return nil
				})
			}()
			seen := map[MessageState]int{}
			select {
			case <-held:
			case <-ctx.Done():
				t.Fatal("m100 was never taken")
			}
			st, err := q.Message(ctx, "m100")
			require.NoError(t, err)
			require.Equal(t, MessageInFlight, st.State, "its handler holds it")
			seen[st.State]++
			close(hold)
			for round := 0; acked.Load() < n-50 && ctx.Err() == nil; round++ {
				// Any message, or one just taken (likely in flight).
				id := fmt.Sprint("m", (round*37)%n)
				switch round % 3 {
				case 1:
					id = latest.Load().(string)
				case 2:
					id = fmt.Sprint("m", min(started.Load()+int64(8+round%32), n-1))
				}
				st, err := q.Message(ctx, id)
				if errors.Is(err, ErrNotFound) {
					_, was := finished.Load(id)
					require.True(t, was, "%s reported gone before its handler finished", id)
					seen[0]++
					continue
				}
				require.NoError(t, err)
				require.Equal(t, id, st.ID)
				require.Contains(t, []MessageState{MessageReady, MessageInFlight}, st.State)
				seen[st.State]++
			}
			stop()
			if err := <-done; !errors.Is(err, context.Canceled) {
				require.NoError(t, err)
			}
			t.Logf("looks: %v (0: gone)", seen)
			assert.Greater(t, seen[MessageReady], 0, "some looks found a ready message")
			assert.Greater(t, seen[MessageInFlight], 0, "some looks found a message in flight")
		})
	}
}

// within checks that got is within d of want.
func within(t *testing.T, want, got time.Time, d time.Duration) {
	t.Helper()
	assert.True(t, got.Sub(want).Abs() <= d, "%v is not within %v of %v", got, d, want)
}

// Lists longer than one find.lua call (500 entries), a Range segment
// naming more priorities than one page of its index, and more in flight
// and dead than one HSCAN or list page: each message is found with its
// place counted across the pages.
func TestMessageAcrossPages(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	enqueue := func(q *Queue, n int, opt func(i int) []Option) {
		for i := 0; i < n; i += MaxBatch {
			var items []EnqueueItem
			for j := i; j < min(i+MaxBatch, n); j++ {
				items = append(items, EnqueueItem{Payload: []byte("x"), Options: opt(j)})
			}
			_, err := q.EnqueueBatch(ctx, items)
			require.NoError(t, err)
		}
	}
	t.Run("Levels", func(t *testing.T) {
		q := openQueue(t, newClient(t), Config{Layout: Levels(2), MaxAttempts: 1})
		const n = 2300
		enqueue(q, n, func(i int) []Option { return []Option{ID(fmt.Sprint("m", i)), Priority(1)} })
		// 1100 taken: 600 in flight, 500 dead.
		var taken []*Message
		for len(taken) < 1100 {
			got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 100, time.Minute)
			require.NoError(t, err)
			taken = append(taken, got...)
		}
		for _, m := range taken[600:] {
			require.NoError(t, failTok(sh(q), ctx, m.token(), 0, "dead "+m.ID, store.FailDead))
		}
		for _, tc := range []struct {
			id    string
			state MessageState
			ahead int
		}{{"m1100", MessageReady, 0}, {"m1700", MessageReady, 600}, {"m2299", MessageReady, 1199},
			{"m0", MessageInFlight, 0}, {"m599", MessageInFlight, 0}, {"m600", MessageDead, 0}, {"m1099", MessageDead, 0}} {
			st, err := q.Message(ctx, tc.id)
			require.NoError(t, err, tc.id)
			assert.Equal(t, tc.state, st.State, tc.id)
			assert.Equal(t, tc.ahead, st.Ahead, tc.id)
			if tc.state == MessageDead {
				assert.Equal(t, "dead "+tc.id, st.Reason)
			}
		}
	})
	t.Run("RangePriorities", func(t *testing.T) {
		q := openQueue(t, newClient(t), Config{Layout: Range(0, 5000, 1)})
		enqueue(q, 1200, func(i int) []Option { return []Option{ID(fmt.Sprint("p", i)), Priority(int64(i))} })
		for _, id := range []string{"p0", "p600", "p1199"} {
			st, err := q.Message(ctx, id)
			require.NoError(t, err, id)
			assert.Equal(t, MessageReady, st.State, id)
			assert.Equal(t, id, st.ID)
		}
	})
}

// An AtMostOnce queue has no lease and no dead letters: its ready and
// delayed messages are found.
func TestMessageAtMostOnce(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(2), Mode: AtMostOnce})
	id, err := q.Enqueue(ctx, []byte("x"), Priority(1))
	require.NoError(t, err)
	later, err := q.Enqueue(ctx, []byte("x"), Delay(time.Hour))
	require.NoError(t, err)
	st, err := q.Message(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, MessageReady, st.State)
	assert.Equal(t, 1, st.Lane)
	st, err = q.Message(ctx, later)
	require.NoError(t, err)
	assert.Equal(t, MessageDelayed, st.State)
}

// Large messages: a find.lua call reads at most about 1 MiB of a list, so
// a search of 12 messages of 256 KiB takes several calls (one would copy
// 3 MiB into Lua while Redis serves nothing else), and still finds each
// with its place.
func TestMessageReadsLargeMessagesInSmallSteps(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t)
	q := openQueue(t, c, Config{Layout: Levels(1), MaxPayload: 1 << 20})
	big := []byte(strings.Repeat("b", 256<<10))
	for i := range 12 {
		_, err := q.Enqueue(ctx, big, ID(fmt.Sprint("big", i)))
		require.NoError(t, err)
	}
	calls := func() int {
		var info string
		require.NoError(t, c.Do(ctx, radix.Cmd(&info, "INFO", "commandstats")))
		for _, line := range strings.Split(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				return n
			}
		}
		return 0
	}
	before := calls()
	st, err := q.Message(ctx, "big0")
	require.NoError(t, err)
	after := calls()
	assert.Equal(t, 0, st.Ahead)
	assert.Equal(t, len(big), len(st.Payload))
	assert.GreaterOrEqual(t, after-before, 3, "12 × 256 KiB read in steps of about 1 MiB")
	st, err = q.Message(ctx, "big7")
	require.NoError(t, err)
	assert.Equal(t, 7, st.Ahead)
}
