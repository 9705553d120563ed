package prioq

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func TestScoreOf(t *testing.T) {
	for _, tc := range []struct {
		p    int64
		want string
	}{
		{0, "0"},
		{5, "-5"},
		{-5, "5"},
		{MaxRangePriority, "-9007199254740992"},
		{-MaxRangePriority, "9007199254740992"},
	} {
		assert.Equal(t, tc.want, scoreOf(tc.p), "priority %d", tc.p)
	}
}

// A higher priority has a lower score (ZPOPMIN serves it first), and neighbours
// stay distinct as float64 scores up to the ±2^53 bounds.
func TestScoreOrderPreserved(t *testing.T) {
	prios := []int64{-MaxRangePriority, -MaxRangePriority + 1, -1000, -1, 0, 1, 1000, MaxRangePriority - 1, MaxRangePriority}
	prev := math.Inf(1)
	for _, p := range prios {
		f, err := strconv.ParseFloat(scoreOf(p), 64)
		require.NoError(t, err)
		assert.Less(t, f, prev, "score of %d", p)
		prev = f
	}
}

func TestScoreRoundTrip(t *testing.T) {
	for _, p := range []int64{0, 1, -1, 42, -42, MaxRangePriority, -MaxRangePriority, MaxRangePriority - 1, -MaxRangePriority + 1} {
		s := scoreOf(p)
		back, err := priorityOfScore(s)
		require.NoError(t, err, s)
		assert.Equal(t, p, back)
		// As Redis prints a score back (%.17g).
		f, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err)
		back, err = priorityOfScore(strconv.FormatFloat(f, 'g', 17, 64))
		require.NoError(t, err)
		assert.Equal(t, p, back)
	}
}

func TestScoreParseBounds(t *testing.T) {
	for _, tc := range []struct {
		score string
		want  int64
	}{
		{"0", 0},
		{"-0", 0},
		{"-5", 5},
		{"5", -5},
		{"-1e3", 1000},
		{"9.0071992547409920e+15", -MaxRangePriority},
		{"-9007199254740992", MaxRangePriority},
		{"9007199254740992", -MaxRangePriority},
	} {
		got, err := priorityOfScore(tc.score)
		require.NoError(t, err, tc.score)
		assert.Equal(t, tc.want, got, tc.score)
	}
	for _, bad := range []string{"", "abc", "1.5", "-0.5", "nan", "inf", "-inf", "9007199254740994", "-9007199254740994", "1e300"} {
		_, err := priorityOfScore(bad)
		assert.ErrorIs(t, err, ErrCorrupt, "score %q", bad)
	}
}

func TestRangeValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Layout
		ok   bool
	}{
		{"one priority, one segment", Range(0, 0, 1), true},
		{"full range, 64 segments", Range(-MaxRangePriority, MaxRangePriority, 64), true},
		{"as many segments as priorities", Range(0, 3, 4), true},
		{"negative range", Range(-10, -1, 2), true},
		{"lo > hi", Range(5, 4, 1), false},
		{"lo below -2^53", Range(-MaxRangePriority-1, 0, 1), false},
		{"hi above 2^53", Range(0, MaxRangePriority+1, 1), false},
		{"int64 extremes", Range(math.MinInt64, math.MaxInt64, 1), false},
		{"more segments than priorities", Range(0, 3, 5), false},
		{"no segments", Range(0, 100, 0), false},
		{"negative segments", Range(0, 100, -1), false},
		{"65 segments", Range(0, 100, 65), false},
	} {
		err := tc.l.validate()
		if tc.ok {
			assert.NoError(t, err, tc.name)
		} else {
			assert.ErrorIs(t, err, ErrInvalidLayout, tc.name)
		}
	}
}

func TestSegmentOf(t *testing.T) {
	full := Range(-MaxRangePriority, MaxRangePriority, 64)
	for _, tc := range []struct {
		l    Layout
		p    int64
		want int
	}{
		{Range(0, 9, 2), 0, 0},
		{Range(0, 9, 2), 4, 0},
		{Range(0, 9, 2), 5, 1},
		{Range(0, 9, 2), 9, 1},
		{Range(0, 9, 3), 3, 0},
		{Range(0, 9, 3), 4, 1},
		{Range(0, 9, 3), 6, 1},
		{Range(0, 9, 3), 7, 2},
		{Range(-5, 5, 1), -5, 0},
		{Range(-5, 5, 1), 5, 0},
		{full, -MaxRangePriority, 0},
		{full, -1, 31},
		{full, 0, 31}, // the range has 2^54+1 priorities: the middle one is in the lower half
		{full, 1, 32},
		{full, MaxRangePriority, 63},
	} {
		got, err := tc.l.laneOf(tc.p)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%v: priority %d", tc.l, tc.p)
	}
	for _, tc := range []struct {
		l Layout
		p int64
	}{
		{Range(0, 9, 2), -1},
		{Range(0, 9, 2), 10},
		{full, math.MinInt64},
		{full, math.MaxInt64},
		{full, MaxRangePriority + 1},
	} {
		_, err := tc.l.laneOf(tc.p)
		assert.ErrorIs(t, err, ErrInvalidPriority, "%v: priority %d", tc.l, tc.p)
	}
}

// Segments are bands of equal width (±1), in priority order.
func TestSegmentWidths(t *testing.T) {
	l := Range(0, 99, 7)
	counts := make([]int, 7)
	last := 0
	for p := int64(0); p <= 99; p++ {
		s, err := l.laneOf(p)
		require.NoError(t, err)
		require.GreaterOrEqual(t, s, last, "priority %d", p)
		last = s
		counts[s]++
	}
	assert.Equal(t, []int{15, 14, 14, 15, 14, 14, 14}, counts)
}

// FuzzScoreRoundTrip checks that every priority a Range accepts survives the
// trip through a sorted-set score (as Redis prints it back) unchanged, and
// that segments are monotonic: a higher priority never lands in a lower segment.
func FuzzScoreRoundTrip(f *testing.F) {
	f.Add(int64(0), int64(1), int64(-MaxRangePriority), int64(MaxRangePriority), 64)
	f.Add(int64(MaxRangePriority), int64(MaxRangePriority-1), int64(-5), int64(MaxRangePriority), 3)
	f.Fuzz(func(t *testing.T, p1, p2, lo, hi int64, segs int) {
		l := Range(lo, hi, segs)
		if l.validate() != nil {
			t.Skip()
		}
		for _, p := range []int64{p1, p2} {
			if p < lo || p > hi {
				continue
			}
			// Redis stores the score as a double and prints it with %.17g.
			f64, err := strconv.ParseFloat(scoreOf(p), 64)
			if err != nil {
				t.Fatal(err)
			}
			back, err := priorityOfScore(strconv.FormatFloat(f64, 'g', 17, 64))
			if err != nil || back != p {
				t.Fatalf("priority %d came back as %d (%v)", p, back, err)
			}
		}
		if p1 < lo || p1 > hi || p2 < lo || p2 > hi {
			return
		}
		s1, err1 := l.laneOf(p1)
		s2, err2 := l.laneOf(p2)
		if err1 != nil || err2 != nil || s1 < 0 || s2 < 0 || s1 >= segs || s2 >= segs {
			t.Fatalf("segments %d %d (%v %v) for %v", s1, s2, err1, err2, l)
		}
		if (p1 < p2 && s1 > s2) || (p1 > p2 && s1 < s2) {
			t.Fatalf("not monotonic: %d->%d, %d->%d in %v", p1, s1, p2, s2, l)
		}
	})
}

// A Range queue stored by an earlier version (meta format 2, segments of
// seq‖envelope) is served as it was by a plain Range layout: ready, delayed,
// in-flight and dead messages written in the old form come out in order,
// and new messages join them in the same form. A Range queue of format 4 is
// refused by a layout that expects the earlier format, as earlier versions
// refuse it (they compare the format exactly).
func TestRangeQueuesOfFormat2KeepWorking(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	name := queueName(t)
	// What an earlier version wrote, byte for byte: the meta record, and a
	// segment member seq‖envelope with score -priority.
	k := storeSortedMember(t, c, name)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", k.meta, "layout", Range(0, 9, 2).String(),
		"mode", AtLeastOnce.String(), "format", storageFormat)))

	q, err := Open(ctx, c, name, Config{Layout: Range(0, 9, 2)})
	require.NoError(t, err)
	assert.True(t, q.cfg.Layout.seqMembers, "found to be of format 2")
	assert.Equal(t, argKindRange, sh(q).kind())
	_, err = q.Enqueue(ctx, []byte("new"), Priority(7))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("later"), Priority(7), Delay(10*time.Millisecond))
	require.NoError(t, err)
	var members []string
	require.NoError(t, c.Do(ctx, radix.Cmd(&members, "ZRANGE", k.lanes[1], "0", "-1")))
	require.Len(t, members, 2, "the new message joins the old one's segment, as a member")
	time.Sleep(20 * time.Millisecond)
	cons := newConsumer(t, q, ConsumerConfig{})
	var got []string
	for range 3 {
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		got = append(got, string(m.Payload))
		require.NoError(t, m.Ack(ctx))
	}
	assert.Equal(t, []string{"old", "new", "later"}, got)
	var meta string
	require.NoError(t, c.Do(ctx, radix.Cmd(&meta, "HGET", k.meta, "format")))
	assert.Equal(t, storageFormat, meta, "its format is kept")

	// A new Range queue is of format 4, which the earlier format's Open
	// refuses.
	fresh := openQueue(t, c, Config{Layout: Range(0, 9, 2)})
	assert.False(t, fresh.cfg.Layout.seqMembers)
	_, err = Open(ctx, c, fresh.name, Config{Layout: seqRange(0, 9, 2)})
	assert.ErrorIs(t, err, ErrConfigMismatch)
}

// A ready Range message with a generated id is stored without Lua, as a
// Levels one is (the script cost Redis 24–45 µs a message, RPUSH 2–3).
// Failed on the code before: one EVALSHA per enqueue.
func TestRangeEnqueueRunsNoScript(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Range(-1<<40, 1<<40, 16)})
	was := commandCalls(t, c)
	for i := range 20 {
		_, err := q.Enqueue(ctx, []byte("x"), Priority(int64(i%3-1)<<30))
		require.NoError(t, err)
	}
	now := commandCalls(t, c)
	assert.Equal(t, was["evalsha"]+was["eval"], now["evalsha"]+now["eval"], "no script")
	assert.GreaterOrEqual(t, now["rpush"]-was["rpush"], 20)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(20), st.Ready)
}

// A waiting Range message costs Redis at most 100 bytes beyond its envelope
// when priorities repeat (the lists are listpacks, as a level's), counted
// with MEMORY USAGE over the queue's keys. Failed on the code before: 175
// bytes (a skiplist node, a dict entry and the sequence per message).
func TestRangeMemoryPerWaitingMessage(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 30*time.Second)
	q := openQueue(t, c, Config{Layout: Range(-1<<40, 1<<40, 16)})
	const n = 3000
	payload := make([]byte, 64)
	var envBytes int
	items := make([]EnqueueItem, 0, 100)
	for i := range n {
		items = append(items, EnqueueItem{Payload: payload, Options: []Option{Priority(int64(i%3-1) << 30)}})
		if len(items) == cap(items) {
			_, err := q.EnqueueBatch(ctx, items)
			require.NoError(t, err)
			items = items[:0]
		}
	}
	var keys []string
	s := (radix.ScannerConfig{Command: "SCAN", Pattern: "*" + q.name + "*", Count: 100000}).New(c)
	var key string
	for s.Next(ctx, &key) {
		keys = append(keys, key)
	}
	require.NoError(t, s.Close())
	var total int64
	for _, k := range keys {
		var n int64
		require.NoError(t, c.Do(ctx, radix.Cmd(&n, "MEMORY", "USAGE", k, "SAMPLES", "0")))
		total += n
	}
	msgs, err := q.Peek(ctx, 1)
	require.NoError(t, err)
	envBytes = len(msgs[0].Payload)
	per := float64(total)/n - float64(envBytes)
	t.Logf("%d keys, %d bytes: %.1f bytes per message beyond its %d-byte payload", len(keys), total, per, envBytes)
	assert.LessOrEqual(t, per, 100.0)
}

// A Range queue of the earlier form whose meta key was lost (a restart
// without persistence) is found by its segments' members when it is opened
// again with Range, and served in that form, not written over as format 4.
// Failed before this check: Open wrote format 4 and takes passed the old
// message by.
func TestRangeSortedQueueWithoutMetaIsFound(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	name := queueName(t)
	k := storeSortedMember(t, c, name)

	q, err := Open(ctx, c, name, Config{Layout: Range(0, 9, 2)})
	require.NoError(t, err)
	var format string
	require.NoError(t, c.Do(ctx, radix.Cmd(&format, "HGET", k.meta, "format")))
	assert.Equal(t, storageFormat, format)
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := cons.Receive(rctx)
	require.NoError(t, err)
	assert.Equal(t, "old", string(m.Payload))
}

// storeSortedMember writes, as a version before format 4 did, one message
// "old" of priority 7 into segment 1 of Range(0, 9, 2) queue name (member
// seq‖envelope, score -7, seq counter 1), and returns the queue's keys.
func storeSortedMember(t *testing.T, c radix.Client, name string) keySet {
	t.Helper()
	k := newKeySet(name, 2)
	env := (&envelope{ID: "@old0000000000000000001", Priority: 7, EnqueuedMs: 1, Payload: []byte("old")}).encode()
	p := radix.NewPipeline()
	p.Append(radix.Cmd(nil, "ZADD", k.lanes[1], "-7", string([]byte{0, 0, 0, 0, 0, 0, 0, 1})+string(env)))
	p.Append(radix.Cmd(nil, "SET", k.seq, "1"))
	require.NoError(t, c.Do(context.Background(), p))
	return k
}
