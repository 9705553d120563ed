package prioq

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func TestExponentialBackoffNeverOverflows(t *testing.T) {
	for _, c := range []struct{ base, max time.Duration }{
		{time.Second, math.MaxInt64},
		{time.Second, time.Hour},
		{time.Nanosecond, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64},
		{0, time.Hour},
		{-time.Second, time.Hour},
	} {
		b := ExponentialBackoff(c.base, c.max)
		for a := -1; a <= 300; a++ {
			d := b(a)
			want := max(c.base, 0) // the undithered delay doubles from base up to max
			for i := 1; i < a && want < c.max; i++ {
				if want > c.max/2 {
					want = c.max
				} else {
					want *= 2
				}
			}
			want = min(want, c.max)
			if d < 0 || d > want || (want > 1 && d < want/2) {
				t.Fatalf("ExponentialBackoff(%v, %v)(%d) = %v, want [%v, %v]", c.base, c.max, a, d, want/2, want)
			}
		}
	}
}

func TestAckOnAtMostOnceMessage(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Mode: AtMostOnce})
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{})
	msg, err := cons.Receive(ctx)
	require.NoError(t, err)
	assert.ErrorIs(t, msg.Ack(ctx), ErrWrongMode)
	assert.ErrorIs(t, q.Pause(ctx), ErrWrongMode)
	assert.True(t, errors.Is(msg.Extend(ctx, time.Second), ErrWrongMode))
}

// Each attempt doubles the delay from base up to the cap; the jitter keeps a
// draw in the upper half [d/2, d) of the undithered delay d.
func TestBackoffGrowthAndCap(t *testing.T) {
	b := ExponentialBackoff(time.Second, time.Hour)
	for _, tc := range []struct {
		attempts int
		want     time.Duration
	}{
		{-5, time.Second},
		{0, time.Second},
		{1, time.Second},
		{2, 2 * time.Second},
		{3, 4 * time.Second},
		{12, 2048 * time.Second}, // the last doubling below the cap
		{13, time.Hour},          // 4096 s is capped
		{14, time.Hour},
		{1000, time.Hour},
		{math.MaxInt, time.Hour},
	} {
		var low, high int // draws below and above 3/4 of want
		for i := 0; i < 200; i++ {
			d := b(tc.attempts)
			if d < tc.want/2 || d >= tc.want {
				t.Fatalf("attempt %d: %v, want [%v, %v)", tc.attempts, d, tc.want/2, tc.want)
			}
			if d < tc.want*3/4 {
				low++
			} else {
				high++
			}
		}
		assert.NotZero(t, low, "attempt %d: no draw in [d/2, 3d/4)", tc.attempts)
		assert.NotZero(t, high, "attempt %d: no draw in [3d/4, d)", tc.attempts)
	}
}

func TestBackoffEdgeValues(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, max time.Duration
		attempts  int
		want      time.Duration
	}{
		{"zero base", 0, time.Hour, 5, 0},
		{"negative base", -time.Second, time.Hour, 1, 0},
		{"zero cap", time.Second, 0, 3, 0},
		{"negative cap", time.Second, -1, 3, 0},
		{"1 ns is not dithered", time.Nanosecond, time.Hour, 1, time.Nanosecond},
		{"1 ns cap", time.Nanosecond, time.Nanosecond, 100, time.Nanosecond},
		{"2 ns dithers to 1 ns", 2 * time.Nanosecond, time.Hour, 1, time.Nanosecond},
		{"1 ns doubled", time.Nanosecond, time.Hour, 2, time.Nanosecond},
	} {
		assert.Equal(t, tc.want, ExponentialBackoff(tc.base, tc.max)(tc.attempts), tc.name)
	}
	// A cap below base caps the first attempt too.
	d := ExponentialBackoff(10*time.Second, 2*time.Second)(1)
	assert.GreaterOrEqual(t, d, time.Second)
	assert.Less(t, d, 2*time.Second)
	// The largest values neither overflow nor loop for long.
	d = ExponentialBackoff(time.Nanosecond, math.MaxInt64)(math.MaxInt)
	assert.GreaterOrEqual(t, d, time.Duration(math.MaxInt64/2))
	assert.Less(t, d, time.Duration(math.MaxInt64))
}

func TestNewMessageAndInfo(t *testing.T) {
	e := envelope{ID: "job-1", CallerID: true, Priority: -3, EnqueuedMs: 1700000000123, Attempts: 4, Payload: []byte("p")}
	m := newMessage(e, nil)
	assert.Equal(t, "job-1", m.ID)
	assert.Equal(t, int64(-3), m.Priority)
	assert.Equal(t, []byte("p"), m.Payload)
	assert.Equal(t, 4, m.Attempts)
	assert.Equal(t, int64(1700000000123), m.EnqueuedAt.UnixMilli())
	assert.True(t, m.callerID)
	assert.True(t, m.LeaseDeadline().IsZero(), "no lease before a take sets one")

	info := newInfo(e)
	assert.Equal(t, MessageInfo{ID: "job-1", Priority: -3, Payload: []byte("p"), Attempts: 4,
		EnqueuedAt: time.UnixMilli(1700000000123)}, info)
}

// Without a lease (an AtMostOnce message) Ack, Retry, Extend and AckBatch fail
// before any Redis call; bad arguments too.
func TestMessageCallsNeedALease(t *testing.T) {
	ctx := context.Background()
	m := &Message{MessageInfo: MessageInfo{ID: "amo"}}
	assert.ErrorIs(t, m.Ack(ctx), ErrWrongMode)
	assert.ErrorIs(t, m.Retry(ctx, time.Second, "x"), ErrWrongMode)
	assert.ErrorIs(t, m.Extend(ctx, time.Second), ErrWrongMode)
	errs := AckBatch(ctx, m)
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], ErrWrongMode)
	assert.Len(t, AckBatch(ctx), 0)

	// Leased, but from two queues: refused as a whole.
	a := &Message{MessageInfo: MessageInfo{ID: "a"}, s: &shard{}, token: "t1"}
	b := &Message{MessageInfo: MessageInfo{ID: "b"}, s: &shard{}, token: "t2"}
	errs = AckBatch(ctx, a, b)
	require.Len(t, errs, 2)
	assert.ErrorIs(t, errs[0], ErrInvalidOption)
	assert.ErrorIs(t, errs[1], ErrInvalidOption)
	errs = AckBatch(ctx, a, m)
	assert.ErrorIs(t, errs[0], ErrWrongMode)
	assert.ErrorIs(t, errs[1], ErrWrongMode)

	assert.ErrorIs(t, a.Extend(ctx, 0), ErrInvalidOption)
	assert.ErrorIs(t, a.Extend(ctx, -time.Second), ErrInvalidOption)
}
