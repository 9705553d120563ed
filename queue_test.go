package prioq

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func TestOpenConfigMismatch(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	name := queueName(t)
	_, err := Open(ctx, c, name, Config{Layout: Levels(3)})
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"other levels", Config{Layout: Levels(4)}},
		{"range", Config{Layout: Range(0, 2, 1)}},
		{"other mode", Config{Layout: Levels(3), Mode: AtMostOnce}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(ctx, c, name, tc.cfg)
			assert.ErrorIs(t, err, ErrConfigMismatch)
		})
	}
	// The zero Config means Levels(3), AtLeastOnce: the same queue.
	_, err = Open(ctx, c, name, Config{})
	assert.NoError(t, err)
}

func TestOpenBadInput(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	for _, tc := range []struct {
		name    string
		qname   string
		cfg     Config
		wantErr error
	}{
		{"empty name", "", Config{}, ErrInvalidName},
		{"brace in name", "a{b", Config{}, ErrInvalidName},
		{"space in name", "a b", Config{}, ErrInvalidName},
		{"long name", string(bytes.Repeat([]byte("x"), 101)), Config{}, ErrInvalidName},
		{"zero levels", "ok", Config{Layout: Levels(0)}, ErrInvalidLayout},
		{"65 levels", "ok", Config{Layout: Levels(65)}, ErrInvalidLayout},
		{"lo > hi", "ok", Config{Layout: Range(5, 4, 1)}, ErrInvalidLayout},
		{"beyond 2^53", "ok", Config{Layout: Range(0, 1<<53+1, 4)}, ErrInvalidLayout},
		{"too many segments", "ok", Config{Layout: Range(0, 3, 5)}, ErrInvalidLayout},
		{"no segments", "ok", Config{Layout: Range(0, 3, 0)}, ErrInvalidLayout},
		{"bad mode", "ok", Config{Mode: Mode(9)}, ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.qname
			if name == "ok" {
				name = queueName(t)
			}
			_, err := Open(ctx, c, name, tc.cfg)
			require.ErrorIs(t, err, tc.wantErr)
			if name != "" && store.ValidateName(name) == nil {
				var n int
				require.NoError(t, c.Do(ctx, radix.Cmd(&n, "EXISTS", store.KeysOf(name, 1).Meta())))
				assert.Zero(t, n, "a rejected Open wrote the meta key")
			}
		})
	}
}

func TestPeekStatsCancelPurge(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	for _, m := range bothModes {
		for _, l := range someLayouts {
			t.Run(m.name+"/"+l.name, func(t *testing.T) {
				q := openQueue(t, c, Config{Layout: l.layout, Mode: m.mode})
				prios := []int64{1, 4, 2, 4, 0}
				ids := make([]string, len(prios))
				for i, p := range prios {
					var err error
					ids[i], err = q.Enqueue(ctx, []byte{byte('a' + i)}, Priority(p))
					require.NoError(t, err)
				}
				delayedID, err := q.Enqueue(ctx, []byte("later"), Delay(time.Hour), Priority(3))
				require.NoError(t, err)

				peek, err := q.Peek(ctx, 3)
				require.NoError(t, err)
				require.Len(t, peek, 3)
				assert.Equal(t, []string{ids[1], ids[3], ids[2]}, []string{peek[0].ID, peek[1].ID, peek[2].ID})
				assert.Equal(t, []byte("b"), peek[0].Payload)

				st, err := q.Stats(ctx)
				require.NoError(t, err)
				assert.EqualValues(t, 5, st.Ready)
				assert.EqualValues(t, 1, st.Delayed)
				assert.Less(t, st.OldestReady, time.Minute)
				var sum int64
				for _, n := range st.Lanes {
					sum += n
				}
				assert.Equal(t, st.Ready, sum)

				require.NoError(t, q.Cancel(ctx, ids[3]))    // ready
				require.NoError(t, q.Cancel(ctx, delayedID)) // delayed
				assert.ErrorIs(t, q.Cancel(ctx, ids[3]), ErrNotFound)
				assert.ErrorIs(t, q.Cancel(ctx, "never-enqueued"), ErrNotFound)
				assert.ErrorIs(t, q.Cancel(ctx, "bad id"), ErrInvalidID)
				peek, err = q.Peek(ctx, 10)
				require.NoError(t, err)
				got := []string{}
				for _, p := range peek {
					got = append(got, p.ID)
				}
				assert.Equal(t, []string{ids[1], ids[2], ids[0], ids[4]}, got)

				n, err := q.Purge(ctx)
				require.NoError(t, err)
				assert.EqualValues(t, 4, n)
				total, err := q.Len(ctx)
				require.NoError(t, err)
				assert.Zero(t, total)
			})
		}
	}
}

// Open refuses a server that may evict any key (allkeys-*): it deletes whole
// lanes while every Enqueue returns nil. volatile-* and noeviction are fine,
// and the caller can opt in. A server that denies CONFIG is let through with
// a log line.
func TestOpenRefusesUnsafeEviction(t *testing.T) {
	for _, tc := range []struct {
		policy string
		allow  bool
		want   error
	}{
		{"allkeys-lru", false, ErrUnsafeEviction},
		{"allkeys-random", false, ErrUnsafeEviction},
		{"allkeys-lfu", true, nil},
		{"volatile-lru", false, nil},
		{"noeviction", false, nil},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			addr := ownServer(t, "--maxmemory-policy", tc.policy)
			c := ownPool(t, addr, 2)
			name := queueName(t)
			_, err := Open(ctxT(t, 5*time.Second), c, name, Config{AllowEviction: tc.allow})
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				assert.ErrorContains(t, err, tc.policy)
				var n int
				require.NoError(t, c.Do(context.Background(), radix.Cmd(&n, "EXISTS", store.KeysOf(name, 3).Meta())))
				assert.Zero(t, n, "a refused Open writes nothing")
			} else {
				require.NoError(t, err)
			}
		})
	}
	t.Run("CONFIG renamed", func(t *testing.T) {
		addr := ownServer(t, "--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "")
		c := ownPool(t, addr, 2)
		var log strings.Builder
		logger := slog.New(slog.NewTextHandler(&log, nil))
		_, err := Open(ctxT(t, 5*time.Second), c, queueName(t), Config{Logger: logger})
		require.NoError(t, err, "without CONFIG prioq cannot know: it says so and goes on")
		assert.Contains(t, log.String(), "could not read maxmemory-policy")
	})
}

// A restart without persistence loses the meta key while processes go on
// with queues they opened before: consumers put it back, so that Open still
// refuses a different configuration.
func TestMetaKeyComesBack(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: Levels(3), Mode: m.mode})
			newConsumer(t, q, ConsumerConfig{SweepInterval: 50 * time.Millisecond, PromoteWait: 100 * time.Millisecond})
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", sh(q).Keys().Meta())))
			require.Eventually(t, func() bool {
				var n int
				require.NoError(t, c.Do(ctx, radix.Cmd(&n, "EXISTS", sh(q).Keys().Meta())))
				return n == 1
			}, 5*time.Second, 20*time.Millisecond, "the meta key did not come back")
			_, err := Open(ctx, c, q.name, Config{Layout: Levels(5), Mode: m.mode})
			assert.ErrorIs(t, err, ErrConfigMismatch)
		})
	}
}

func TestPurgeKeepsIDsOfLiveMessages(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			_, err := q.Enqueue(ctx, []byte("in flight"), ID("flying"))
			require.NoError(t, err)
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			flying, err := cons.Receive(ctx)
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte("dead"), ID("dead-1"))
			require.NoError(t, err)
			m, err := cons.Receive(ctx)
			require.NoError(t, err)
			require.NoError(t, failTok(sh(q), ctx, m.token(), 0, "no", "dead"))
			_, err = q.Enqueue(ctx, []byte("ready"), ID("ready-1"))
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte("later"), ID("later-1"), Delay(time.Hour))
			require.NoError(t, err)

			n, err := q.Purge(ctx)
			require.NoError(t, err)
			assert.EqualValues(t, 2, n)
			for _, id := range []string{"flying", "dead-1"} {
				_, err := q.Enqueue(ctx, []byte("copy"), ID(id))
				assert.ErrorIs(t, err, ErrDuplicate, "%s is still alive", id)
			}
			for _, id := range []string{"ready-1", "later-1"} {
				_, err := q.Enqueue(ctx, []byte("again"), ID(id))
				assert.NoError(t, err, "%s was purged", id)
			}
			require.NoError(t, flying.Ack(ctx))
		})
	}
}

func TestOpenNilClient(t *testing.T) {
	assert.NotPanics(t, func() {
		_, err := Open(context.Background(), nil, "q", Config{})
		assert.ErrorIs(t, err, ErrInvalidOption)
	})
}

func TestOpenBadInputWithoutRedis(t *testing.T) {
	ctx := context.Background()
	// Each of these is refused before the first Redis call.
	c := clientFunc(func(context.Context, radix.Action) error {
		t.Error("unexpected Redis call")
		return errors.New("no Redis here")
	})
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"", Config{}, ErrInvalidName},
		{"q", Config{Layout: Levels(65)}, ErrInvalidLayout},
		{"q", Config{Mode: Mode(2)}, ErrInvalidOption},
		{"q", Config{PromoteBatch: MaxBatch + 1}, ErrInvalidOption},
	} {
		_, err := Open(ctx, c, tc.name, tc.cfg)
		assert.ErrorIs(t, err, tc.want, "%q %+v", tc.name, tc.cfg)
	}
}

// OpenExisting takes the layout and mode from the meta key.
func TestOpenExisting(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Range(-5, 5, 2), Mode: AtMostOnce})
	got, err := OpenExisting(ctx, c, q.Name(), Config{Layout: Levels(7)})
	require.NoError(t, err)
	assert.Equal(t, q.Layout().String(), got.Layout().String())
	assert.Equal(t, AtMostOnce, got.Mode())
	_, err = OpenExisting(ctx, c, q.Name()+".missing", Config{})
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = OpenExisting(ctx, c, "", Config{})
	assert.ErrorIs(t, err, ErrInvalidName)
}

// Stats.Enqueued and Stats.Acked count what was stored and acked, by every
// path (plain, batch, delayed, caller id, merged), and a duplicate id is not
// counted; they survive Purge (totals, for rates).
func TestStatsCountsEnqueuesAndAcks(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	for _, l := range threeLanes {
		t.Run(l.name, func(t *testing.T) {
			q := openQueue(t, c, Config{Layout: l.layout})
			for range 3 {
				_, err := q.Enqueue(ctx, []byte("plain"))
				require.NoError(t, err)
			}
			res, err := q.EnqueueBatch(ctx, []EnqueueItem{
				{Payload: []byte("a"), Options: []Option{ID("dup")}},
				{Payload: []byte("b"), Options: []Option{ID("dup")}},
				{Payload: []byte("c")}, {Payload: []byte("d")},
			})
			require.NoError(t, err)
			require.ErrorIs(t, res[1].Err, ErrDuplicate)
			_, err = q.Enqueue(ctx, []byte("later"), Delay(time.Hour))
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte("id"), ID("other"))
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte("again"), ID("other"))
			require.ErrorIs(t, err, ErrDuplicate)

			msgs, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 10, time.Minute)
			require.NoError(t, err)
			require.Len(t, msgs, 7)
			for _, err := range AckBatch(ctx, msgs[:3]...) { // one pipeline or script
				require.NoError(t, err)
			}
			var wg sync.WaitGroup
			for _, m := range msgs[3:5] { // single acks, maybe merged
				wg.Add(1)
				go func() { defer wg.Done(); assert.NoError(t, m.Ack(ctx)) }()
			}
			wg.Wait()
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(3+3+1+1), st.Enqueued)
			assert.Equal(t, int64(5), st.Acked)

			_, err = q.Purge(ctx)
			require.NoError(t, err)
			st, err = q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(8), st.Enqueued, "totals outlive Purge")
		})
	}
}

// A counts key of the wrong type does not fail an enqueue or an ack that
// stored or acked (the totals are for rates); Stats (and Len) report it, as
// for any key of the queue.
func TestWrongTypedCountsKeyFailsNoWrite(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(2)})
	corrupt(t, q, sh(q).Keys().Counts())
	_, err := q.Enqueue(ctx, []byte("plain"))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("scripted"), ID("x"))
	require.NoError(t, err)
	var n int
	require.NoError(t, c.Do(ctx, radix.Cmd(&n, "LLEN", sh(q).Keys().Lanes()[0])))
	require.Equal(t, 2, n)
	msgs, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 2, time.Minute)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.False(t, msgs[0].d.CallerID)
	require.NoError(t, msgs[0].Ack(ctx)) // the pipelined ack
	require.True(t, msgs[1].d.CallerID)
	require.NoError(t, msgs[1].Ack(ctx)) // ack.lua
	var inflight int
	require.NoError(t, c.Do(ctx, radix.Cmd(&inflight, "ZCARD", sh(q).Keys().Leases())))
	assert.Zero(t, inflight)
	_, err = q.Stats(ctx)
	assert.Error(t, err)
}

func TestPauseResume(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			cons := newConsumer(t, q, ConsumerConfig{})
			require.NoError(t, q.Pause(ctx))
			id, err := q.Enqueue(ctx, []byte("x"))
			require.NoError(t, err, "producers keep enqueueing while paused")
			short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
			_, err = cons.Receive(short)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.True(t, st.Paused)
			assert.EqualValues(t, 1, st.Ready)
			assert.Zero(t, st.InFlight)

			start := time.Now()
			require.NoError(t, q.Resume(ctx))
			m, err := cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, id, m.ID)
			assert.Less(t, time.Since(start), time.Second, "Resume wakes idle consumers")
			require.NoError(t, m.Ack(ctx))
		})
	}
}

// Stats of a Range queue counts at most statsNames priorities' lists in
// all (LLEN), however many its segments name, and estimates the rest: with
// one message per priority the estimate is exact. Failed on a04cba8: it
// counted up to 10,000 names per segment, 640,000 calls for 64 segments.
func TestRangeStatsCostIsBounded(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 30*time.Second)
	q := openQueue(t, c, Config{Layout: Range(0, 1<<20, 8)})
	const n = 3000
	items := make([]EnqueueItem, 0, 500)
	for i := range n {
		items = append(items, EnqueueItem{Payload: []byte("x"), Options: []Option{Priority(int64(i) * 300)}})
		if len(items) == cap(items) {
			_, err := q.EnqueueBatch(ctx, items)
			require.NoError(t, err)
			items = items[:0]
		}
	}
	was := commandCalls(t, c)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	now := commandCalls(t, c)
	assert.Equal(t, int64(n), st.Ready)
	assert.LessOrEqual(t, now["llen"]-was["llen"], store.StatsNames+1, "and the dead letters' LLEN")
}

// A server that runs no Lua (EVAL and EVALSHA renamed away here, as a
// Valkey built without Lua or a Garnet not told to run scripts has none) is
// refused by Open with ErrUnsupportedServer, naming the cause, and nothing
// is written: not a failure at the first enqueue.
func TestOpenRefusesAServerWithoutScripting(t *testing.T) {
	addr := ownServer(t, "--rename-command", "EVAL", "", "--rename-command", "EVALSHA", "")
	c := ownPool(t, addr, 4)
	ctx := ctxT(t, 10*time.Second)
	_, err := Open(ctx, c, queueName(t), Config{})
	require.ErrorIs(t, err, ErrUnsupportedServer)
	assert.Contains(t, err.Error(), "no Lua scripts")
	var n int
	require.NoError(t, c.Do(ctx, radix.Cmd(&n, "DBSIZE")))
	assert.Zero(t, n, "nothing written")
}
