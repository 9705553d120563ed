package prioq

import (
	"math"
	"testing"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func TestLayoutValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Layout
		ok   bool
	}{
		{"Levels(1)", Levels(1), true},
		{"Levels(64)", Levels(64), true},
		{"Levels(0)", Levels(0), false},
		{"Levels(-1)", Levels(-1), false},
		{"Levels(65)", Levels(65), false},
		{"zero Layout before defaults", Layout{}, false},
		{"zero Layout with defaults", Layout{}.withDefaults(), true},
		{"Range", Range(0, 9, 3), true},
		{"bad Range", Range(9, 0, 3), false},
	} {
		err := tc.l.l.Validate()
		if tc.ok {
			assert.NoError(t, err, tc.name)
		} else {
			assert.ErrorIs(t, err, ErrInvalidLayout, tc.name)
		}
	}
	assert.Equal(t, Levels(3), Layout{}.withDefaults(), "the zero Layout is Levels(3)")
	assert.Equal(t, Range(1, 2, 1), Range(1, 2, 1).withDefaults(), "a set layout is kept")
}

// String is what the meta key stores: a change makes existing queues refuse
// to open (ErrConfigMismatch).
func TestLayoutString(t *testing.T) {
	for _, tc := range []struct {
		l    Layout
		want string
	}{
		{Levels(3), "levels:3"},
		{Levels(64), "levels:64"},
		{Range(-1000, 1000, 7), "range:-1000:1000:7"},
		{Range(-MaxRangePriority, MaxRangePriority, 64), "range:-9007199254740992:9007199254740992:64"},
		{Layout{}, "invalid"},
	} {
		assert.Equal(t, tc.want, tc.l.String())
	}
}

func TestLayoutLanes(t *testing.T) {
	assert.Equal(t, 1, Levels(1).l.Lanes())
	assert.Equal(t, 64, Levels(64).l.Lanes())
	assert.Equal(t, 3, Range(0, 9, 3).l.Lanes())
	assert.Equal(t, 3, Layout{}.withDefaults().l.Lanes())
}

func TestLayoutLaneOf(t *testing.T) {
	for _, tc := range []struct {
		l    Layout
		p    int64
		want int
	}{
		{Levels(1), 0, 0},
		{Levels(3), 0, 0},
		{Levels(3), 2, 2},
		{Levels(64), 63, 63},
		{Range(0, 9, 2), 9, 1},
		{Range(-10, -1, 2), -10, 0},
	} {
		got, err := tc.l.l.LaneOf(tc.p)
		require.NoError(t, err, "%v: %d", tc.l, tc.p)
		assert.Equal(t, tc.want, got, "%v: %d", tc.l, tc.p)
	}
	for _, tc := range []struct {
		l Layout
		p int64
	}{
		{Levels(1), 1},
		{Levels(3), -1},
		{Levels(3), 3},
		{Levels(64), 64},
		{Levels(3), math.MaxInt64},
		{Levels(3), math.MinInt64},
		{Range(0, 9, 2), 10},
		{Range(-10, -1, 2), 0},
	} {
		_, err := tc.l.l.LaneOf(tc.p)
		assert.ErrorIs(t, err, ErrInvalidPriority, "%v: %d", tc.l, tc.p)
	}
}

func TestLayoutDefaultPriority(t *testing.T) {
	for _, tc := range []struct {
		l    Layout
		want int64
	}{
		{Levels(3), 0},
		{Range(-5, 5, 2), 0},
		{Range(0, 10, 2), 0},
		{Range(-10, 0, 2), 0},
		{Range(1, 10, 2), 1},     // 0 is outside: the lowest priority
		{Range(-10, -1, 2), -10}, // the same below 0
	} {
		assert.Equal(t, tc.want, tc.l.l.DefaultPriority(), tc.l.String())
	}
}

// ParseLayout reads what String writes, and nothing else.
func TestParseLayout(t *testing.T) {
	for _, l := range []Layout{Levels(1), Levels(3), Levels(MaxLevels), Range(-100, 100, 8), Range(-MaxRangePriority, MaxRangePriority, 64)} {
		got, err := ParseLayout(l.String())
		require.NoError(t, err, l.String())
		assert.Equal(t, l.String(), got.String())
	}
	for _, bad := range []string{"", "levels:", "levels:0", "levels:65", "levels:3x", "levels:03", "range:1:0:1", "range:0:10", "queue:3", " levels:3"} {
		_, err := ParseLayout(bad)
		assert.ErrorIs(t, err, ErrInvalidLayout, bad)
	}
}
