package prioq

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// filledLayout has more lanes than filledLanes: an AtLeastOnce queue of it
// has a filled index.
const filledTop = 15

var filledLayout = Levels(filledTop + 1)

// A take from a queue of many lanes sends Redis its few fixed keys and the
// filled index, not every lane: Redis pays per key of a script call and per
// key of each multi-key command in it (from 2 to 64 lanes a take cost 1.5–1.7×
// as much), nor every Range segment. Read from the slow log, which records
// every command's arguments. Failed on the code before: the take carried 68
// keys (64 lanes).
func TestTakeFromManyLanesCarriesFewKeys(t *testing.T) {
	addr := ownServer(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "10000")
	c := ownPool(t, addr, 4)
	for _, l := range []Layout{Levels(64), Range(0, 630, 64)} {
		t.Run(l.String(), func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l})
			for i := range 3 {
				_, err := q.Enqueue(ctx, []byte("x"), Priority(int64(i*31)))
				require.NoError(t, err)
			}
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SLOWLOG", "RESET")))
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			assert.Equal(t, []int64{62, 31, 0}, ackPriorities(t, ctx, cons, 3))

			var log []any
			require.NoError(t, c.Do(ctx, radix.Cmd(&log, "SLOWLOG", "GET", "10000")))
			takes := 0
			for _, e := range log {
				entry, _ := e.([]any)
				require.True(t, len(entry) >= 4, "slow log entry %v", e)
				var args []string
				raw, _ := entry[3].([]any)
				for _, a := range raw {
					if b, ok := a.([]byte); ok {
						a = string(b)
					}
					args = append(args, fmt.Sprint(a))
				}
				// take.lua's KEYS begin with the paused and the leases keys.
				if len(args) < 5 || !strings.EqualFold(args[0], "evalsha") && !strings.EqualFold(args[0], "fcall") || args[3] != sh(q).Keys().Paused() || args[4] != sh(q).Keys().Leases() {
					continue
				}
				takes++
				// Five and the fence (keys.go), which the script never reads.
				assert.Equal(t, "6", args[2], "keys of a take: %v", args[:min(len(args), 9)])
				if len(args) > 8 {
					assert.Equal(t, sh(q).Keys().Fence(), args[8], "the take's last key")
				}
				for _, a := range args {
					assert.False(t, strings.Contains(a, "lane:"), "no lane key among the take's arguments: %v", a)
				}
			}
			assert.True(t, takes >= 3, "takes seen: %d", takes)
		})
	}
}

// ackPriorities receives n messages one by one, acks each, and returns
// their priorities in the order received.
func ackPriorities(t *testing.T, ctx context.Context, cons *Consumer, n int) []int64 {
	t.Helper()
	var got []int64
	for range n {
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		got = append(got, m.Priority)
		require.NoError(t, m.Ack(ctx))
	}
	return got
}

// filledNames says whether the filled index of q names lane.
func filledNames(t *testing.T, c radix.Client, q *Queue, lane int) bool {
	t.Helper()
	var score string
	require.NoError(t, c.Do(context.Background(), radix.Cmd(&score, "ZSCORE", sh(q).Keys().Filled(), fmt.Sprint(lane))))
	return score != ""
}

// Every write that puts a message in a lane names the lane in the filled
// index, in the same atomic step; a write that did not would leave its
// message behind every lane named (here lane 0) until they all emptied.
// Each case takes the top lane's message first, so that its name is gone,
// enqueues one of lane 0, then writes the top lane's message back through
// the path under test: the next take must return it first. (Checked: with
// the naming left out of by_lane, push_one, the take's undo or the enqueue's
// MULTI in turn, the cases of that path fail.)
func TestFilledIndexNamesEveryWrite(t *testing.T) {
	for _, l := range []struct {
		name   string
		layout Layout
		high   int64 // a priority of the top lane
	}{{"Levels", filledLayout, filledTop}, {"Range", Range(0, 1599, filledTop+1), 1550}} {
		t.Run(l.name, func(t *testing.T) { testFilledIndexNamesEveryWrite(t, l.layout, l.high) })
	}
}

func testFilledIndexNamesEveryWrite(t *testing.T, layout Layout, high int64) {
	type env struct {
		c    radix.Client
		q    *Queue
		cons *Consumer
		high *Message // leased, when the case took it
	}
	take := func(t *testing.T, ctx context.Context, e *env) {
		t.Helper()
		_, err := e.q.Enqueue(ctx, []byte("high"), Priority(high))
		require.NoError(t, err)
		e.high, err = e.cons.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, "high", string(e.high.Payload))
		require.False(t, filledNames(t, e.c, e.q, filledTop), "the emptied lane's name went")
	}
	cases := []struct {
		name  string
		taken bool // the case writes back e.high, taken before lane 0 fills
		write func(t *testing.T, ctx context.Context, e *env)
	}{
		{"plain enqueue (MULTI)", false, func(t *testing.T, ctx context.Context, e *env) {
			_, err := e.q.Enqueue(ctx, []byte("high"), Priority(high))
			require.NoError(t, err)
		}},
		{"enqueue.lua (caller id)", false, func(t *testing.T, ctx context.Context, e *env) {
			_, err := e.q.Enqueue(ctx, []byte("high"), Priority(high), ID("the-high-one"))
			require.NoError(t, err)
		}},
		{"grouped.lua (a group's first message: its marker)", false, func(t *testing.T, ctx context.Context, e *env) {
			_, err := e.q.Enqueue(ctx, []byte("high"), Priority(high), Group("g"))
			require.NoError(t, err)
		}},
		{"enqueue.lua (batch of two lanes)", false, func(t *testing.T, ctx context.Context, e *env) {
			_, err := e.q.EnqueueBatch(ctx, []EnqueueItem{
				{Payload: []byte("high"), Options: []Option{Priority(high), ID("b1")}},
				{Payload: []byte("mid"), Options: []Option{Priority(3), ID("b2")}}})
			require.NoError(t, err)
		}},
		{"promote.lua", false, func(t *testing.T, ctx context.Context, e *env) {
			_, err := e.q.Enqueue(ctx, []byte("high"), Priority(high), Delay(time.Hour))
			require.NoError(t, err)
			require.False(t, filledNames(t, e.c, e.q, filledTop))
			n, _, _, err := sh(e.q).PromoteAt(ctx, fmt.Sprint(time.Now().Add(2*time.Hour).UnixMilli()))
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}},
		{"fail.lua (retry now)", true, func(t *testing.T, ctx context.Context, e *env) {
			require.NoError(t, failTok(sh(e.q), ctx, e.high.token(), 0, "again", store.FailRetry))
		}},
		{"sweep.lua (lease expired)", true, func(t *testing.T, ctx context.Context, e *env) {
			require.NoError(t, e.c.Do(ctx, radix.Cmd(nil, "ZADD", sh(e.q).Keys().Leases(), "1", e.high.token())))
			back, _, _, err := sh(e.q).Sweep(ctx, 10)
			require.NoError(t, err)
			require.Equal(t, 1, back)
		}},
		{"release.lua (given back)", true, func(t *testing.T, ctx context.Context, e *env) {
			n, err := sh(e.q).Release(ctx, []string{e.high.token()})
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}},
		{"dead.lua (requeued)", true, func(t *testing.T, ctx context.Context, e *env) {
			require.NoError(t, failTok(sh(e.q), ctx, e.high.token(), 0, "dead", store.FailDead))
			require.NoError(t, e.q.RequeueDead(ctx, e.high.ID))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: layout})
			require.True(t, sh(q).Filled())
			e := &env{c: c, q: q, cons: newConsumer(t, q, ConsumerConfig{NoPromoter: true})}
			if tc.taken {
				take(t, ctx, e)
			}
			_, err := q.Enqueue(ctx, []byte("low"), Priority(0))
			require.NoError(t, err)
			tc.write(t, ctx, e)
			assert.True(t, filledNames(t, c, q, filledTop), "the write named its lane")
			m, err := e.cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, "high", string(m.Payload), "the top lane's message first")
			assert.Equal(t, high, m.Priority)
		})
	}

	// A take that fails after its pop (the in-flight hash of the wrong type)
	// puts the message back and names its lane again.
	t.Run("take.lua undo", func(t *testing.T) {
		c := newClient(t)
		ctx := ctxT(t, 10*time.Second)
		q := openQueue(t, c, Config{Layout: layout})
		s := sh(q)
		_, err := q.Enqueue(ctx, []byte("high"), Priority(high))
		require.NoError(t, err)
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", s.Keys().Inflight(), "not a hash")))
		_, _, err = shardTake(s, ctx, s.Keys().HighFirst(), 1, time.Minute)
		require.Error(t, err)
		_, err = takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute, guess: true})
		require.ErrorContains(t, err, "WRONGTYPE")
		assert.True(t, filledNames(t, c, q, filledTop), "the undo named the lane again")
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", s.Keys().Inflight())))
		_, err = q.Enqueue(ctx, []byte("low"), Priority(0))
		require.NoError(t, err)
		m, err := newConsumer(t, q, ConsumerConfig{NoPromoter: true}).Receive(ctx)
		require.NoError(t, err)
		assert.Equal(t, "high", string(m.Payload))
	})
}

// The filled index is a hint kept true by every write, but it can be lost
// (deleted by hand, of the wrong type, holding members that name no lane, or
// names of lanes emptied by takes that did not read it): no message is ever
// left behind for it, and what is ready is served highest first.
func TestFilledIndexDamageHidesNothing(t *testing.T) {
	fill := func(t *testing.T, ctx context.Context, q *Queue) {
		for _, p := range []int64{0, 7, filledTop, 7} {
			_, err := q.Enqueue(ctx, []byte(fmt.Sprint(p)), Priority(p))
			require.NoError(t, err)
		}
	}
	drain := func(t *testing.T, ctx context.Context, cons *Consumer) []string {
		var got []string
		for {
			ms, err := cons.ReceiveBatch(ctxT(t, 300*time.Millisecond), 1)
			if len(ms) == 0 {
				return got
			}
			require.NoError(t, err)
			got = append(got, string(ms[0].Payload))
			require.NoError(t, ms[0].Ack(ctx))
		}
	}
	want := []string{"15", "7", "7", "0"}
	cases := []struct {
		name   string
		damage func(t *testing.T, ctx context.Context, c radix.Client, s *store.Shard)
	}{
		{"deleted", func(t *testing.T, ctx context.Context, c radix.Client, s *store.Shard) {
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", s.Keys().Filled())))
		}},
		{"of the wrong type", func(t *testing.T, ctx context.Context, c radix.Client, s *store.Shard) {
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", s.Keys().Filled())))
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", s.Keys().Filled(), "x")))
		}},
		{"names of no lane", func(t *testing.T, ctx context.Context, c radix.Client, s *store.Shard) {
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", s.Keys().Filled(), "-1000", "x", "-999", "99", "-998", "-3", "-997", "1.5")))
		}},
		{"names of empty lanes above", func(t *testing.T, ctx context.Context, c radix.Client, s *store.Shard) {
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", s.Keys().Filled(), "-14", "14", "-9", "9")))
		}},
		{"only the lowest lane named", func(t *testing.T, ctx context.Context, c radix.Client, s *store.Shard) {
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZREM", s.Keys().Filled(), "15", "7")))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			var logs lockedBuffer
			q := openQueue(t, c, Config{Layout: filledLayout, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			fill(t, ctx, q)
			tc.damage(t, ctx, c, sh(q))
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true, BlockTimeout: 50 * time.Millisecond})
			got := drain(t, ctx, cons)
			if tc.name == "only the lowest lane named" {
				// Lanes 15 and 7 are found once lane 0 empties: late, not lost.
				slices.Sort(got)
				assert.Equal(t, []string{"0", "15", "7", "7"}, got)
			} else {
				assert.Equal(t, want, got)
			}
			// Writes go on: a plain enqueue and a scripted one both store.
			_, err := q.Enqueue(ctx, []byte("after"), Priority(filledTop))
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte("after-id"), Priority(3), ID("after-id"))
			require.NoError(t, err)
			assert.Equal(t, []string{"after", "after-id"}, drain(t, ctx, cons))
			if tc.name == "of the wrong type" {
				assert.True(t, strings.Contains(logs.String(), sh(q).Keys().Filled()), "the broken index is reported: %s", logs.String())
			}
		})
	}
}

// Pause holds the takes of a queue with a filled index, and Resume lets them
// go on; a paused key of the wrong type fails the take, changing nothing, as
// the multi-key pop does for other queues.
func TestFilledIndexHonoursPause(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: filledLayout})
	s := sh(q)
	_, err := q.Enqueue(ctx, []byte("x"), Priority(9))
	require.NoError(t, err)
	require.NoError(t, q.Pause(ctx))
	msgs, paused, err := shardTake(s, ctx, s.Keys().HighFirst(), 1, time.Minute)
	require.NoError(t, err)
	assert.True(t, paused)
	assert.Len(t, msgs, 0)
	r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute, guess: true})
	require.NoError(t, err)
	assert.True(t, r.paused)
	require.NoError(t, q.Resume(ctx))

	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", s.Keys().Paused(), "x")))
	_, err = takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute, guess: true})
	require.ErrorContains(t, err, "WRONGTYPE")
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", s.Keys().Paused())))
	r, err = takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute, guess: true})
	require.NoError(t, err)
	require.Len(t, r.msgs, 1, "the failed take changed nothing")
	assert.Equal(t, "x", string(r.msgs[0].Payload))
}

// A Levels queue of many lanes stored before format 5 has no filled index:
// Open finds its format and serves it as before, and what was waiting in its
// lanes is taken highest first. Failed on the code before... it did not
// exist; with format 5 written over it the queue would be refused
// (ErrConfigMismatch), which is what this checks does not happen.
func TestLevelsQueuesOfFormat2KeepWorking(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	// Stored as an AtMostOnce queue (which has no index), then its meta
	// rewritten to what an earlier version wrote for an AtLeastOnce one.
	old := openQueue(t, c, Config{Layout: filledLayout, Mode: AtMostOnce})
	name := old.name
	for _, p := range []int64{2, filledTop, 9} {
		_, err := old.Enqueue(ctx, []byte(fmt.Sprint(p)), Priority(p))
		require.NoError(t, err)
	}
	k := sh(old).Keys()
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", k.Meta(), "mode", AtLeastOnce.String(), "format", "2")))
	var n int
	require.NoError(t, c.Do(ctx, radix.Cmd(&n, "EXISTS", k.Filled())))
	require.Equal(t, 0, n)

	q, err := Open(ctx, c, name, Config{Layout: filledLayout})
	require.NoError(t, err)
	assert.True(t, q.layout().Unfilled())
	assert.False(t, sh(q).Filled())
	assert.True(t, !sh(q).IsRange() && !sh(q).Filled(), "plain Levels: no filled index")
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	assert.Equal(t, []int64{filledTop, 9, 2}, ackPriorities(t, ctx, cons, 3))
	var format string
	require.NoError(t, c.Do(ctx, radix.Cmd(&format, "HGET", k.Meta(), "format")))
	assert.Equal(t, "2", format, "its format is kept")

	// A new one is of format 5, which the earlier versions' Open refuses
	// (they compare the format exactly).
	fresh := openQueue(t, c, Config{Layout: filledLayout})
	require.NoError(t, c.Do(ctx, radix.Cmd(&format, "HGET", sh(fresh).Keys().Meta(), "format")))
	assert.Equal(t, "5", format)
	// Few lanes, AtMostOnce or sharded: no index, the format as before.
	for _, cfg := range []Config{{Layout: Levels(store.FilledLanes)}, {Layout: filledLayout, Mode: AtMostOnce}, {Layout: filledLayout, Shards: 2}} {
		q := openQueue(t, c, cfg)
		assert.False(t, sh(q).Filled(), "%+v", cfg)
		require.NoError(t, c.Do(ctx, radix.Cmd(&format, "HGET", sh(q).Keys().Meta(), "format")))
		assert.NotEqual(t, "5", format)
	}
}

// An index lost while lanes hold messages and made again by a push names
// that push's lane alone: the next take checks every lane anyway (the index
// has no "*" yet), so a message in a lane no name points at is not left
// behind while named lanes keep work. Found by review: with a steady stream
// into lane 0, the top lane's message waited forever.
func TestFilledIndexRemadeByAPushIsChecked(t *testing.T) {
	for _, l := range []struct {
		name   string
		layout Layout
		high   int64
	}{{"Levels", filledLayout, filledTop}, {"Range", Range(0, 1599, filledTop+1), 1550}} {
		t.Run(l.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			s := sh(q)
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", s.Keys().Filled(), "x")))
			_, err := q.Enqueue(ctx, []byte("high"), Priority(l.high)) // its name refused
			require.NoError(t, err)
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", s.Keys().Filled())))
			for range 2 {
				_, err := q.Enqueue(ctx, []byte("low"), Priority(0))
				require.NoError(t, err)
			}
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			var got []string
			for range 5 {
				m, err := cons.Receive(ctx)
				require.NoError(t, err)
				got = append(got, string(m.Payload))
				require.NoError(t, m.Ack(ctx))
				_, err = q.Enqueue(ctx, []byte("low"), Priority(0))
				require.NoError(t, err)
			}
			assert.Equal(t, "high", got[0], "received: %v", got)
		})
	}
}
