package prioq

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// tickOf is the tick time (unix ms) in a tick's id (sched:NAME:MS[~k]).
func tickOf(t *testing.T, id string) int64 {
	t.Helper()
	id, _, _ = strings.Cut(id, "~")
	ms, err := strconv.ParseInt(id[strings.LastIndexByte(id, ':')+1:], 10, 64)
	require.NoError(t, err, id)
	return ms
}

// receiveTicks runs consumers until ctx ends, acking everything, and returns
// each message's id with when it was received (host clock, unix ms).
func receiveTicks(ctx context.Context, cons []*Consumer) map[string][]int64 {
	var mu sync.Mutex
	got := map[string][]int64{}
	var wg sync.WaitGroup
	for _, c := range cons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				m, err := c.Receive(ctx)
				if err != nil {
					continue
				}
				mu.Lock()
				got[m.ID] = append(got[m.ID], time.Now().UnixMilli())
				mu.Unlock()
				_ = m.Ack(context.Background())
			}
		}()
	}
	wg.Wait()
	return got
}

// Every tick of a schedule is enqueued exactly once while several
// consumers, each with its own promoter, race to fire it: no tick twice,
// none missing between the first and the last.
func TestScheduleEveryTickOnceWithManyPromoters(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	q := openQueue(t, newClient(t), Config{Layout: Levels(2)})
	var cons []*Consumer
	for range 4 {
		cons = append(cons, newConsumer(t, q, ConsumerConfig{}))
	}
	_, err := q.Schedule(ctx, "tick", "@every 100ms", []byte("p"), Missed(MissedAll), Priority(1))
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	got := receiveTicks(rctx, cons)
	require.NoError(t, q.Unschedule(ctx, "tick"))

	var ticks []int64
	var late []float64
	for id, at := range got {
		assert.Len(t, at, 1, "tick %s received %d times", id, len(at))
		ticks = append(ticks, tickOf(t, id))
		late = append(late, float64(at[0]-tickOf(t, id)))
	}
	slices.Sort(ticks)
	require.GreaterOrEqual(t, len(ticks), 30, "about 40 ticks in 4 s")
	for i := 1; i < len(ticks); i++ {
		assert.Equal(t, int64(100), ticks[i]-ticks[i-1], "consecutive ticks at %d", i)
	}
	slices.Sort(late)
	for id, at := range got {
		if float64(at[0]-tickOf(t, id)) >= late[len(late)-1] {
			t.Logf("latest: %s, %d ms after the first tick", id, tickOf(t, id)-ticks[0])
		}
	}
	t.Logf("%d ticks, each once; lateness (receive - tick time) p50 %.0f ms, p99 %.0f ms, max %.0f ms",
		len(ticks), late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
}

// What a schedule enqueues for the ticks it missed while no consumer ran.
func TestScheduleMissedPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy MissedPolicy
		check  func(t *testing.T, first, resumed int64, ticks []int64)
	}{
		{MissedAll, func(t *testing.T, first, resumed int64, ticks []int64) {
			assert.Equal(t, first, ticks[0], "every missed tick, from the first")
			for i := 1; i < len(ticks); i++ {
				assert.Equal(t, int64(100), ticks[i]-ticks[i-1])
			}
		}},
		{MissedOnce, func(t *testing.T, first, resumed int64, ticks []int64) {
			// One message for the missed ticks, the latest: a tick after
			// the resume, or the last before it. (Ticks after may coalesce
			// too, when a promotion is more than a tick late.)
			assert.Greater(t, ticks[0], resumed-100, "one message for the missed ticks: the latest")
			for i := 1; i < len(ticks); i++ {
				assert.Equal(t, int64(0), (ticks[i]-ticks[i-1])%100)
				assert.Greater(t, ticks[i], ticks[i-1])
			}
		}},
		{MissedSkip, func(t *testing.T, first, resumed int64, ticks []int64) {
			assert.Greater(t, ticks[0], resumed, "no message for the missed ticks")
		}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, newClient(t), Config{Layout: Levels(1)})
			next, err := q.Schedule(ctx, "s", "@every 100ms", []byte("p"), Missed(tc.policy))
			require.NoError(t, err)
			time.Sleep(700 * time.Millisecond) // ~7 ticks missed: nothing promotes
			var n int64
			require.NoError(t, sh(q).Client().Do(ctx, radix.Cmd(&n, "ZCARD", sh(q).Keys().Delayed())))
			require.Equal(t, int64(0), n, "nothing fired without a promoter")
			var tm []string
			require.NoError(t, sh(q).Client().Do(ctx, radix.Cmd(&tm, "TIME")))
			sec, _ := strconv.ParseInt(tm[0], 10, 64)
			us, _ := strconv.ParseInt(tm[1], 10, 64)
			resumed := sec*1000 + us/1000
			rctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
			defer cancel()
			got := receiveTicks(rctx, []*Consumer{newConsumer(t, q, ConsumerConfig{})})
			var ticks []int64
			for id := range got {
				ticks = append(ticks, tickOf(t, id))
			}
			slices.Sort(ticks)
			require.GreaterOrEqual(t, len(ticks), 2, "ticks after the resume fire: %v", ticks)
			tc.check(t, next.UnixMilli(), resumed, ticks)
			list, err := q.Schedules(ctx)
			require.NoError(t, err)
			require.Len(t, list, 1)
			assert.Equal(t, tc.policy, list[0].Missed)
			assert.False(t, list[0].LastFired.IsZero())
		})
	}
}

// Bad specs, names and options are refused, and nothing is written.
func TestScheduleRefusesBadInput(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(2)})
	for _, tc := range []struct {
		name, spec string
		payload    []byte
		opts       []Option
		want       error
	}{
		{"n", "* * * *", []byte("p"), nil, ErrInvalidSchedule},
		{"n", "61 * * * *", []byte("p"), nil, ErrInvalidSchedule},
		{"n", "0 0 31 2 *", []byte("p"), nil, ErrInvalidSchedule},
		{"n", "@every 0s", []byte("p"), nil, ErrInvalidSchedule},
		{"n", "CRON_TZ=Mars/Olympus 0 * * * *", []byte("p"), nil, ErrInvalidSchedule},
		{"", "@hourly", []byte("p"), nil, ErrInvalidID},
		{"a b", "@hourly", []byte("p"), nil, ErrInvalidID},
		{strings.Repeat("n", MaxScheduleName+1), "@hourly", []byte("p"), nil, ErrInvalidID},
		{"n", "@hourly", nil, nil, ErrEmptyPayload},
		{"n", "@hourly", []byte("p"), []Option{Priority(9)}, ErrInvalidPriority},
		{"n", "@hourly", []byte("p"), []Option{Delay(time.Second)}, ErrInvalidOption},
		{"n", "@hourly", []byte("p"), []Option{ID("x")}, ErrInvalidOption},
		{"n", "@hourly", []byte("p"), []Option{TickID("no-tick")}, ErrInvalidOption},
		{"n", "@hourly", []byte("p"), []Option{TickID("{tick}" + strings.Repeat("x", 120))}, ErrInvalidID},
		{"n", "@hourly", []byte("p"), []Option{Missed(MissedPolicy(7))}, ErrInvalidOption},
	} {
		_, err := q.Schedule(ctx, tc.name, tc.spec, tc.payload, tc.opts...)
		assert.ErrorIs(t, err, tc.want, "%q %q", tc.name, tc.spec)
	}
	assert.True(t, errors.Is(ErrInvalidSchedule, ErrInvalidOption))
	assert.Empty(t, existingKeys(t, q), "nothing written")
	_, err := q.Enqueue(ctx, []byte("p"), Missed(MissedAll))
	assert.ErrorIs(t, err, ErrInvalidOption, "Enqueue refuses Schedule's options")
	assert.ErrorIs(t, q.Unschedule(ctx, "none"), ErrNotFound)
}

// A schedules hash of the wrong type fails Schedule and the fire, and
// nothing else is written; delayed messages still promote.
func TestScheduleKeyOfTheWrongType(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(1)})
	c := sh(q).Client()
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", sh(q).Keys().Schedules(), "wrong type")))
	_, err := q.Schedule(ctx, "s", "@every 10ms", []byte("p"))
	require.Error(t, err)
	assert.Equal(t, []string{sh(q).Keys().Schedules()}, existingKeys(t, q), "nothing written")

	// A due time with a wrong-typed record store: the fire fails, writes
	// nothing, and the promotion of other delayed messages goes on.
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", sh(q).Keys().SDue(), "1", "s")))
	_, err = q.Enqueue(ctx, []byte("d"), Delay(20*time.Millisecond), ID("due"))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	moved, _, _, err := sh(q).Promote(ctx)
	assert.Error(t, err, "the fire fails")
	assert.Equal(t, 1, moved, "the delayed message was promoted")
	var score float64
	require.NoError(t, c.Do(ctx, radix.Cmd(&score, "ZSCORE", sh(q).Keys().SDue(), "s")))
	assert.Equal(t, float64(1), score, "the due time is unchanged")
	_, err = q.Schedules(ctx)
	assert.Error(t, err)
}

// A stored record that does not parse takes the schedule off (it would be
// due forever) with an error, once; Schedules shows it with Err, and
// Schedule mends it.
func TestScheduleCorruptRecordIsTakenOff(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(1)})
	c := sh(q).Client()
	good, err := json.Marshal(map[string]any{"spec": "@hourly", "payload": []byte("p"), "id": "sched:{name}:{tick}"})
	require.NoError(t, err)
	// Not JSON; a rev the script would not read (it would lose every
	// compare, and the promoter spin); the same for the last fire time.
	for _, rec := range []string{"1||{not json", "+1||" + string(good), "1|x|" + string(good)} {
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", sh(q).Keys().Schedules(), "s", rec)))
		require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", sh(q).Keys().SDue(), "1", "s")))
		_, _, _, err := sh(q).Promote(ctx)
		assert.ErrorIs(t, err, ErrCorrupt, rec)
		_, _, _, err = sh(q).Promote(ctx)
		assert.NoError(t, err, "reported once: it is off")
	}
	list, err := q.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.ErrorIs(t, list[0].Err, ErrCorrupt)
	assert.True(t, list[0].Next.IsZero())
	next, err := q.Schedule(ctx, "s", "@hourly", []byte("p"))
	require.NoError(t, err)
	list, err = q.Schedules(ctx)
	require.NoError(t, err)
	assert.NoError(t, list[0].Err)
	assert.Equal(t, next, list[0].Next)
	assert.Equal(t, "@hourly", list[0].Spec)
}

// On a queue of several shards, schedules live in shard 0 and their ticks'
// ids route there, so Cancel finds them by id.
func TestScheduleShardedQueue(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(1), Shards: 3})
	_, err := q.Schedule(ctx, "g", "@hourly", []byte("p"), Group("tenant"))
	assert.ErrorIs(t, err, ErrInvalidOption, "a group chooses another shard")
	_, err = q.Schedule(ctx, "s", "@every 100ms", []byte("p"), Missed(MissedAll))
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
	defer cancel()
	got := receiveTicks(rctx, []*Consumer{newConsumer(t, q, ConsumerConfig{})})
	require.NoError(t, q.Unschedule(ctx, "s"))
	require.GreaterOrEqual(t, len(got), 4)
	for id, at := range got {
		assert.Len(t, at, 1)
		assert.Equal(t, 0, q.shardOf(id), id)
	}
	list, err := q.Schedules(ctx)
	require.NoError(t, err)
	assert.Empty(t, list, "unscheduled")
}

// Schedule, Unschedule and a fire with any key of the queue of the wrong
// type either succeed or fail changing nothing (as scripts_test.go's
// operations).
func TestScheduleScriptsWithAWrongTypedKeyChangeNothing(t *testing.T) {
	ops := []struct {
		name string
		run  func(ctx context.Context, q *Queue) error
	}{
		{"schedule new", func(ctx context.Context, q *Queue) error {
			_, err := q.Schedule(ctx, "new", "@hourly", []byte("n"))
			return err
		}},
		{"schedule replace", func(ctx context.Context, q *Queue) error {
			_, err := q.Schedule(ctx, "due", "@hourly", []byte("n"))
			return err
		}},
		{"unschedule", func(ctx context.Context, q *Queue) error { return q.Unschedule(ctx, "due") }},
		{"fire", func(ctx context.Context, q *Queue) error { return sh(q).FireDue(ctx) }},
	}
	probe := newFixture(t, threeLanes[0].layout)
	for _, op := range ops {
		for ki := range sh(probe.q).Keys().All() {
			f := newFixture(t, threeLanes[0].layout)
			ctx := ctxT(t, 10*time.Second)
			_, err := f.q.Schedule(ctx, "due", "@every 1ms", []byte("d"), Missed(MissedAll))
			require.NoError(t, err)
			time.Sleep(5 * time.Millisecond)
			key := sh(f.q).Keys().All()[ki]
			corrupt(t, f.q, key)
			before := snapshot(t, f.q)
			if err := op.run(ctx, f.q); err == nil {
				continue
			}
			after := snapshot(t, f.q)
			for k, v := range before {
				if after[k] != v {
					t.Errorf("%s with %s of the wrong type failed but changed %s", op.name, key, k)
				}
			}
		}
	}
}

// A MultiConsumer fires the schedules of its queues (Schedule announces an
// earlier due time, its promotions chain on the next fire time), and an
// AtMostOnce queue with a Range layout gets its ticks too.
func TestScheduleMultiConsumerAndAtMostOnce(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t)
	qs := openMany(t, c, queueName(t), 3, Config{Layout: Levels(2)})
	mc := newMulti(t, c, MultiConfig{Queues: names(qs)})
	time.Sleep(200 * time.Millisecond) // subscribed
	_, err := qs[1].Schedule(ctx, "m", "@every 100ms", []byte("multi"), Missed(MissedAll))
	require.NoError(t, err)
	var ticks []int64
	for len(ticks) < 5 {
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, qs[1].Name(), m.Queue())
		ticks = append(ticks, tickOf(t, m.ID))
		require.NoError(t, m.Ack(ctx))
	}
	for i := 1; i < len(ticks); i++ {
		assert.Equal(t, int64(100), ticks[i]-ticks[i-1], "%v", ticks)
	}

	amo := openQueue(t, c, Config{Layout: Range(-50, 50, 4), Mode: AtMostOnce})
	_, err = amo.Schedule(ctx, "a", "@every 100ms", []byte("amo"), Priority(-20))
	require.NoError(t, err)
	cons := newConsumer(t, amo, ConsumerConfig{})
	for range 3 {
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(-20), m.Priority)
		assert.True(t, strings.HasPrefix(m.ID, "sched:a:"), m.ID)
	}
}

// A fire does not wait for replicas (as a promotion does not): on a primary
// that has none, as after a failover, WaitReplicas fails Schedule's own
// write (stored, not confirmed) but never the promotions that fire it.
func TestScheduleFireDoesNotWaitForReplicas(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(1), WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	_, err := q.Schedule(ctx, "s", "@every 10ms", []byte("p"))
	require.ErrorIs(t, err, ErrNotReplicated, "stored, not confirmed")
	time.Sleep(30 * time.Millisecond)
	moved, _, _, err := sh(q).Promote(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, moved, "the tick fired and was promoted")
}

// MaxWait on a schedule: each tick must be taken within d of its tick time
// (the server's clock). Ticks missed while nobody promoted (MissedAll) are
// fired late and go to the dead letters at their first take; a tick taken
// in time runs. The once options and StartBy are refused (a tick is kept
// once by its id; its start-by time comes from its tick).
func TestScheduleMaxWaitDropsLateTicks(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(1)})
	for _, o := range []Option{StartBy(time.Now().Add(time.Hour)), UniqueKey("k", time.Minute), Debounce("k", time.Second)} {
		_, err := q.Schedule(ctx, "bad", "@every 1s", []byte("p"), o)
		require.ErrorIs(t, err, ErrInvalidOption)
	}
	_, err := q.Schedule(ctx, "s", "@every 100ms", []byte("p"), Missed(MissedAll), MaxWait(150*time.Millisecond))
	require.NoError(t, err)
	list, err := q.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, 150*time.Millisecond, list[0].MaxWait)
	time.Sleep(700 * time.Millisecond) // ~7 ticks missed: nothing promotes
	c := newConsumer(t, q, ConsumerConfig{})
	m, err := c.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Ack(ctx))
	by, err := strconv.ParseInt(m.Headers[StartByHeader], 10, 64)
	require.NoError(t, err)
	assert.Equal(t, int64(150), by-tickOf(t, m.ID), "start-by: the tick plus MaxWait")
	dead, err := q.DeadLetters(ctx, 0, 100)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(dead), 3, "the ticks missed by more than MaxWait are dead letters")
	for _, d := range dead {
		assert.True(t, strings.HasPrefix(d.Reason, "expired: not started by"), d.Reason)
	}
}
