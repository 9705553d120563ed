package store

import (
	"math"
	"strconv"
	"testing"

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
