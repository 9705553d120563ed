package prioq

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
)

func TestSleepCtx(t *testing.T) {
	start := time.Now()
	assert.True(t, sleepCtx(context.Background(), 20*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	assert.False(t, sleepCtx(ctx, time.Hour), "a done ctx ends the sleep")
	assert.Less(t, time.Since(start), time.Second)
}

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
