package prioq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/prioq/prioq/internal/testkit/require"
)

// serverMs is the Redis server's clock, in ms.
func serverMs(t *testing.T, c radix.Client) int64 {
	t.Helper()
	var tm []string
	require.NoError(t, c.Do(context.Background(), radix.Cmd(&tm, "TIME")))
	s, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return s*1000 + us/1000
}

// UniqueFor (issue 34): a second enqueue of the id within the window is
// refused even after the first was handled; the window is the server's
// clock, [first, first+d): exactly d after, an enqueue is stored.
func TestUniqueForRefusesWithinItsWindowEvenAfterHandled(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	id, err := q.Enqueue(ctx, []byte("first"), ID("report-42"), UniqueFor(time.Hour))
	require.NoError(t, err)
	require.Equal(t, "report-42", id)
	key := sh(q).Keys().Prefix() + "uniq:report-42"
	var pttl int64
	require.NoError(t, cl.Do(ctx, radix.Cmd(&pttl, "PTTL", key)))
	require.True(t, pttl > int64((time.Hour-10*time.Second)/time.Millisecond) && pttl <= int64(time.Hour/time.Millisecond), "the key lives the window: %d ms", pttl)

	// Handled: its id is free for plain enqueues, not for UniqueFor ones.
	c := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	m, err := c.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Ack(ctx))
	_, err = q.Enqueue(ctx, []byte("second"), ID("report-42"), UniqueFor(time.Hour))
	require.ErrorIs(t, err, ErrDuplicate)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), st.Ready)
	require.Equal(t, int64(1), st.Enqueued, "a refused enqueue writes nothing")
	require.NoError(t, cl.Do(ctx, radix.Cmd(&pttl, "PTTL", key)))
	require.True(t, pttl > int64((time.Hour-10*time.Second)/time.Millisecond), "a refused enqueue does not move the window")

	// The edges, by the server's clock: the window opened d - 5 s ago is
	// open; one opened exactly d ago (or d + 1 ms) is over.
	d := 10 * time.Second
	for _, c := range []struct {
		ago    time.Duration
		stored bool
	}{{d - 5*time.Second, false}, {d, true}, {d + time.Millisecond, true}} {
		since := serverMs(t, cl) - c.ago.Milliseconds()
		require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "SET", sh(q).Keys().Prefix()+"uniq:edge", strconv.FormatInt(since, 10), "PX", "60000")))
		_, err := q.Enqueue(ctx, []byte("x"), UniqueKey("edge", d))
		if c.stored {
			require.NoError(t, err, "opened %v ago", c.ago)
		} else {
			require.ErrorIs(t, err, ErrDuplicate, "opened %v ago", c.ago)
		}
	}

	// A host whose clock is an hour off changes nothing: the window is
	// the server's.
	skewed := q.withClock(func() time.Time { return time.Now().Add(time.Hour) })
	_, err = skewed.Enqueue(ctx, []byte("x"), UniqueKey("skew", time.Minute))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("x"), UniqueKey("skew", time.Minute))
	require.ErrorIs(t, err, ErrDuplicate)
}

// Concurrent enqueues of one key store one message; a batch holding the key
// twice stores its first; on a queue of several shards the key picks the
// shard, so the window holds across them.
func TestUniqueKeyUnderConcurrencyBatchesAndShards(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	for _, shards := range []int{1, 4} {
		q := openQueue(t, cl, Config{Layout: Levels(2), Shards: shards})
		var stored, dup atomic.Int64
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), UniqueKey("once", time.Minute))
				switch {
				case err == nil:
					stored.Add(1)
				case errors.Is(err, ErrDuplicate):
					dup.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		require.Equal(t, int64(1), stored.Load(), "shards %d", shards)
		require.Equal(t, int64(19), dup.Load())

		res, err := q.EnqueueBatch(ctx, []EnqueueItem{
			{Payload: []byte("a"), Options: []Option{UniqueKey("pair", time.Minute)}},
			{Payload: []byte("b"), Options: []Option{UniqueKey("pair", time.Minute)}},
			{Payload: []byte("c")},
		})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.ErrorIs(t, res[1].Err, ErrDuplicate)
		require.NoError(t, res[2].Err)
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), st.Ready)
	}
}

// Bad input is refused with ErrInvalidOption and writes nothing; a window
// key of the wrong type fails the whole batch before its first write.
func TestOnceOptionsRefuseBadInput(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	sharded := openQueue(t, cl, Config{Layout: Levels(2), Shards: 2})
	long := string(make([]byte, MaxOnceKey+1))
	for i, c := range []struct {
		q    *Queue
		opts []Option
	}{
		{q, []Option{UniqueFor(time.Minute)}},                                  // no ID
		{q, []Option{ID("a"), UniqueFor(0)}},                                   // no window
		{q, []Option{ID("a"), UniqueFor(367 * 24 * time.Hour)}},                // too long
		{q, []Option{UniqueKey("", time.Minute)}},                              // no key
		{q, []Option{UniqueKey(long, time.Minute)}},                            // key too long
		{q, []Option{UniqueKey("k", time.Minute), Debounce("k", time.Second)}}, // two
		{q, []Option{ID("a"), Debounce("k", time.Second)}},
		{q, []Option{Debounce("k", time.Second), Delay(time.Second)}},
		{q, []Option{DebounceFirst("k", time.Second), At(time.Now().Add(time.Hour))}},
		{q, []Option{Debounce("k", time.Microsecond)}},
		{sharded, []Option{UniqueKey("k", time.Minute), Group("g")}},
		{sharded, []Option{Debounce("k", time.Second), OrderingKey("o")}},
		{sharded, []Option{UniqueKey("k", time.Minute), ID("a")}},
	} {
		_, err := c.q.Enqueue(ctx, []byte("x"), c.opts...)
		require.ErrorIs(t, err, ErrInvalidOption, "case %d", i)
	}
	for _, qq := range []*Queue{q, sharded} {
		st, err := qq.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(0), st.Ready+st.Delayed+st.Enqueued, "nothing written")
	}
	var keys []string
	require.NoError(t, cl.Do(ctx, radix.Cmd(&keys, "KEYS", sh(q).Keys().Prefix()+"uniq:*")))
	require.Equal(t, 0, len(keys))

	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "RPUSH", sh(q).Keys().Prefix()+"uniq:bad", "x")))
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "RPUSH", sh(q).Keys().Prefix()+"deb:bad", "x")))
	for _, o := range []Option{UniqueKey("bad", time.Minute), Debounce("bad", time.Second)} {
		_, err := q.EnqueueBatch(ctx, []EnqueueItem{{Payload: []byte("a")}, {Payload: []byte("b"), Options: []Option{o}}})
		require.ErrorContains(t, err, "WRONGTYPE")
	}
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), st.Ready+st.Delayed+st.Enqueued, "a failed batch writes nothing")
}

// Debounce (issue 34): enqueues with one key while its message waits leave
// one message, the last one's, due d after the last enqueue; the replaced
// ones are gone. Once it is due, the next enqueue starts a new one.
func TestDebounceKeepsTheLastDueAfterTheLast(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	for _, layout := range []Layout{Levels(2), Range(0, 1000, 4)} {
		q := openQueue(t, cl, Config{Layout: layout})
		var ids []string
		for i := range 5 {
			id, err := q.Enqueue(ctx, []byte(fmt.Sprintf("v%d", i)), Debounce("user-7", time.Hour), Group("g"))
			require.NoError(t, err)
			ids = append(ids, id)
		}
		last := serverMs(t, cl)
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Delayed, "%v: one message waits", layout)
		page, err := q.Scheduled(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, ids[4], page[0].ID)
		require.Equal(t, "v4", string(page[0].Payload))
		due := page[0].Due.UnixMilli()
		require.True(t, due > last+int64(time.Hour/time.Millisecond)-5000 && due <= last+int64(time.Hour/time.Millisecond)+1, "due %d, last enqueue %d", due, last)
		for _, gone := range ids[:4] {
			require.ErrorIs(t, q.Cancel(ctx, gone), ErrNotFound)
		}

		// Due now and taken: the next enqueue starts a new message.
		require.NoError(t, q.RunNow(ctx, ids[4]))
		c := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
		m, err := c.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, "v4", string(m.Payload))
		next, err := q.Enqueue(ctx, []byte("v5"), Debounce("user-7", time.Hour), Group("g"))
		require.NoError(t, err)
		require.NotEqual(t, ids[4], next)
		st, err = q.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Delayed)
		require.Equal(t, int64(1), st.InFlight, "the earlier one runs beside the new one waiting")
		require.NoError(t, m.Ack(ctx))
	}
}

// DebounceFirst keeps the first message: later enqueues store nothing,
// report Folded with its id, and move its due time to d after them.
func TestDebounceFirstKeepsTheFirst(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	for _, cfg := range []Config{{Layout: Levels(2)}, {Layout: Levels(2), Shards: 3}, {Layout: RangeSorted(0, 100, 2)}} {
		q := openQueue(t, cl, cfg)
		first, err := q.Enqueue(ctx, []byte("first"), DebounceFirst("k", time.Hour), Priority(1))
		require.NoError(t, err)
		page, err := q.Scheduled(ctx, 0, 1)
		require.NoError(t, err)
		due0 := page[0].Due
		time.Sleep(5 * time.Millisecond)
		res, err := q.EnqueueBatch(ctx, []EnqueueItem{{Payload: []byte("second"), Options: []Option{DebounceFirst("k", time.Hour)}}})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.True(t, res[0].Folded)
		require.Equal(t, first, res[0].ID)
		id, err := q.Enqueue(ctx, []byte("third"), DebounceFirst("k", 2*time.Hour))
		require.NoError(t, err)
		require.Equal(t, first, id)
		page, err = q.Scheduled(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, "first", string(page[0].Payload))
		require.True(t, page[0].Due.Sub(due0) > 59*time.Minute, "moved to d after the last: %v -> %v", due0, page[0].Due)

		// A shorter window makes it due sooner, and a sleeping promoter is
		// told (it would otherwise sleep until the hour).
		c := newConsumer(t, q, ConsumerConfig{})
		time.Sleep(100 * time.Millisecond) // the promoter sleeps on the 2 h due time
		_, err = q.Enqueue(ctx, []byte("fourth"), DebounceFirst("k", 50*time.Millisecond))
		require.NoError(t, err)
		m, err := c.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, "first", string(m.Payload))
		require.Equal(t, first, m.ID)
		require.NoError(t, m.Ack(ctx))
	}
}

// StartBy and MaxWait (issue 34's start timeout): a message taken after its
// time never reaches a handler: AtLeastOnce moves it to the dead letters
// (reason "expired: not started by ..."), AtMostOnce drops it and reports it
// (ErrTooLate); one taken in time runs. Every receive path, layouts, a
// sharded queue, a group.
func TestStartByLateMessagesNeverRun(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 30*time.Second)
	for _, cfg := range []Config{
		{Layout: Levels(2)}, {Layout: Range(0, 100, 2)}, {Layout: Levels(2), Shards: 2},
		{Layout: Levels(2), Mode: AtMostOnce}, {Layout: Range(0, 100, 2), Mode: AtMostOnce},
	} {
		q := openQueue(t, cl, cfg)
		// Its time passed while it waited (a host clock an hour behind
		// wrote it, as a producer whose work is an hour old would).
		old := q.withClock(func() time.Time { return time.Now().Add(-time.Hour) })
		opts := []Option{MaxWait(time.Minute)}
		if cfg.Mode == AtLeastOnce && cfg.Shards == 0 {
			opts = append(opts, Group("g"))
		}
		late, err := old.Enqueue(ctx, []byte("late"), opts...)
		require.NoError(t, err)
		ok, err := q.Enqueue(ctx, []byte("in time"), StartBy(time.Now().Add(time.Hour)))
		require.NoError(t, err)

		var reported atomic.Value
		c := newConsumer(t, q, ConsumerConfig{NoPromoter: true, OnError: func(err error) {
			if errors.Is(err, ErrTooLate) {
				reported.Store(err)
			}
		}})
		m, err := c.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, ok, m.ID, "%+v: the late one is never handed out", cfg)
		if cfg.Mode == AtMostOnce {
			require.Eventually(t, func() bool { return reported.Load() != nil }, 5*time.Second, 10*time.Millisecond, "reported")
			require.ErrorContains(t, reported.Load().(error), late)
			continue
		}
		require.NoError(t, m.Ack(ctx))
		dead, err := q.DeadLetters(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, dead, 1)
		require.Equal(t, late, dead[0].ID)
		require.ErrorContains(t, errors.New(dead[0].Reason), "expired: not started by")
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.DeadLettered)
		require.Equal(t, int64(0), st.Ready+st.InFlight)
	}
}

// StartBy's bad input is refused and nothing written.
func TestStartByRefusesBadInput(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	too := map[string]string{}
	for i := range MaxHeaders {
		too[fmt.Sprint("h", i)] = "v"
	}
	for i, opts := range [][]Option{
		{StartBy(time.Now().Add(-time.Second))},
		{StartBy(time.Now().Add(time.Minute)), Delay(time.Hour)},
		{StartBy(time.Now().Add(time.Minute)), At(time.Now().Add(2 * time.Minute))},
		{MaxWait(0)},
		{MaxWait(-time.Second)},
		{MaxWait(time.Second), StartBy(time.Now().Add(time.Hour))},
	} {
		_, err := q.Enqueue(ctx, []byte("x"), opts...)
		require.ErrorIs(t, err, ErrInvalidOption, "case %d", i)
	}
	_, err := q.Enqueue(ctx, []byte("x"), Headers(too), MaxWait(time.Minute))
	require.ErrorIs(t, err, ErrInvalidHeader, "one header more than the limit")
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), st.Enqueued)
}
