package assert_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// recorder is a testing.TB that records failures instead of reporting them.
// Only the methods the checks call are overridden.
type recorder struct {
	testing.TB
	errors  []string
	failNow bool
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) FailNow() { r.failNow = true }

var errSentinel = errors.New("sentinel")

func TestChecks(t *testing.T) {
	empty := ""
	full := "x"
	for _, tc := range []struct {
		name  string
		check func(t testing.TB) bool
		pass  bool
	}{
		{"Equal equal", func(t testing.TB) bool { return assert.Equal(t, 1, 1) }, true},
		{"Equal unequal", func(t testing.TB) bool { return assert.Equal(t, 1, 2) }, false},
		{"Equal other type", func(t testing.TB) bool { return assert.Equal(t, int64(1), 1) }, false},
		{"Equal deep", func(t testing.TB) bool { return assert.Equal(t, []string{"a"}, []string{"a"}) }, true},
		{"Equal nil and empty bytes", func(t testing.TB) bool { return assert.Equal(t, []byte(nil), []byte{}) }, true},
		{"NotEqual", func(t testing.TB) bool { return assert.NotEqual(t, 1, 2) }, true},
		{"NotEqual equal", func(t testing.TB) bool { return assert.NotEqual(t, "a", "a") }, false},
		{"EqualValues converts", func(t testing.TB) bool { return assert.EqualValues(t, int64(3), 3) }, true},
		{"EqualValues differs", func(t testing.TB) bool { return assert.EqualValues(t, int64(3), 4) }, false},
		{"EqualValues keeps fractions", func(t testing.TB) bool { return assert.EqualValues(t, 3, 3.5) }, false},
		{"EqualValues no int to string", func(t testing.TB) bool { return assert.EqualValues(t, "\x03", 3) }, false},
		{"True", func(t testing.TB) bool { return assert.True(t, true) }, true},
		{"True false", func(t testing.TB) bool { return assert.True(t, false) }, false},
		{"False true", func(t testing.TB) bool { return assert.False(t, true) }, false},
		{"NoError nil", func(t testing.TB) bool { return assert.NoError(t, nil) }, true},
		{"NoError error", func(t testing.TB) bool { return assert.NoError(t, errSentinel) }, false},
		{"Error nil", func(t testing.TB) bool { return assert.Error(t, nil) }, false},
		{"ErrorIs wrapped", func(t testing.TB) bool { return assert.ErrorIs(t, fmt.Errorf("w: %w", errSentinel), errSentinel) }, true},
		{"ErrorIs other", func(t testing.TB) bool { return assert.ErrorIs(t, errors.New("sentinel"), errSentinel) }, false},
		{"ErrorIs nil", func(t testing.TB) bool { return assert.ErrorIs(t, nil, errSentinel) }, false},
		{"ErrorContains", func(t testing.TB) bool { return assert.ErrorContains(t, errSentinel, "senti") }, true},
		{"ErrorContains nil", func(t testing.TB) bool { return assert.ErrorContains(t, nil, "") }, false},
		{"Zero 0", func(t testing.TB) bool { return assert.Zero(t, 0) }, true},
		{"Zero nil", func(t testing.TB) bool { return assert.Zero(t, nil) }, true},
		{"Zero empty string", func(t testing.TB) bool { return assert.Zero(t, "") }, true},
		{"Zero 1", func(t testing.TB) bool { return assert.Zero(t, 1) }, false},
		{"Zero empty slice", func(t testing.TB) bool { return assert.Zero(t, []int{}) }, false},
		{"NotZero 1", func(t testing.TB) bool { return assert.NotZero(t, 1) }, true},
		{"Empty slice", func(t testing.TB) bool { return assert.Empty(t, []int{}) }, true},
		{"Empty map", func(t testing.TB) bool { return assert.Empty(t, map[string]int{}) }, true},
		{"Empty pointer to empty", func(t testing.TB) bool { return assert.Empty(t, &empty) }, true},
		{"Empty pointer to full", func(t testing.TB) bool { return assert.Empty(t, &full) }, false},
		{"Empty full slice", func(t testing.TB) bool { return assert.Empty(t, []int{1}) }, false},
		{"NotEmpty", func(t testing.TB) bool { return assert.NotEmpty(t, "x") }, true},
		{"NotEmpty empty", func(t testing.TB) bool { return assert.NotEmpty(t, "") }, false},
		{"Len", func(t testing.TB) bool { return assert.Len(t, []int{1, 2}, 2) }, true},
		{"Len wrong", func(t testing.TB) bool { return assert.Len(t, "abc", 2) }, false},
		{"Len no length", func(t testing.TB) bool { return assert.Len(t, 5, 0) }, false},
		{"Contains substring", func(t testing.TB) bool { return assert.Contains(t, "hello", "ell") }, true},
		{"Contains no substring", func(t testing.TB) bool { return assert.Contains(t, "hello", "xyz") }, false},
		{"Contains element", func(t testing.TB) bool { return assert.Contains(t, []int{1, 2}, 2) }, true},
		{"Contains no element", func(t testing.TB) bool { return assert.Contains(t, []int{1, 2}, 3) }, false},
		{"Contains key", func(t testing.TB) bool { return assert.Contains(t, map[string]int{"a": 1}, "a") }, true},
		{"Contains value is not a key", func(t testing.TB) bool { return assert.Contains(t, map[string]int{"a": 1}, 1) }, false},
		{"Less", func(t testing.TB) bool { return assert.Less(t, 1, 2) }, true},
		{"Less equal", func(t testing.TB) bool { return assert.Less(t, 1, 1) }, false},
		{"Less greater", func(t testing.TB) bool { return assert.Less(t, "b", "a") }, false},
		{"Less other types", func(t testing.TB) bool { return assert.Less(t, 1, int64(2)) }, false},
		{"LessOrEqual equal", func(t testing.TB) bool { return assert.LessOrEqual(t, 1.5, 1.5) }, true},
		{"Greater durations", func(t testing.TB) bool { return assert.Greater(t, 2*time.Second, time.Second) }, true},
		{"Greater less", func(t testing.TB) bool { return assert.Greater(t, uint(1), uint(2)) }, false},
		{"GreaterOrEqual equal", func(t testing.TB) bool { return assert.GreaterOrEqual(t, 3, 3) }, true},
		{"GreaterOrEqual less", func(t testing.TB) bool { return assert.GreaterOrEqual(t, 2, 3) }, false},
		{"NotPanics", func(t testing.TB) bool { return assert.NotPanics(t, func() {}) }, true},
		{"NotPanics panic", func(t testing.TB) bool { return assert.NotPanics(t, func() { panic("boom") }) }, false},
	} {
		r := &recorder{}
		got := tc.check(r)
		if got != tc.pass {
			t.Errorf("%s: returned %v, want %v", tc.name, got, tc.pass)
		}
		if failed := len(r.errors) > 0; failed == tc.pass {
			t.Errorf("%s: reported %q, want pass=%v", tc.name, r.errors, tc.pass)
		}
	}
}

func TestMessage(t *testing.T) {
	r := &recorder{}
	assert.Equal(r, 1, 2, "run %d of %s", 7, "x")
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "message: run 7 of x") {
		t.Errorf("format message: %q", r.errors)
	}
	r = &recorder{}
	assert.True(r, false, 42)
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "message: 42") {
		t.Errorf("single value message: %q", r.errors)
	}
}

func TestEventually(t *testing.T) {
	r := &recorder{}
	start := time.Now()
	if assert.Eventually(r, func() bool { return false }, 30*time.Millisecond, 5*time.Millisecond) {
		t.Error("Eventually held for a condition that never holds")
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("gave up after %v, before its 30ms", took)
	}
	if len(r.errors) != 1 {
		t.Errorf("reported %q", r.errors)
	}

	r = &recorder{}
	calls := 0
	if !assert.Eventually(r, func() bool { calls++; return calls == 3 }, time.Minute, time.Millisecond) {
		t.Errorf("Eventually failed: %q", r.errors)
	}
	if calls != 3 {
		t.Errorf("condition called %d times, want 3", calls)
	}
}

func TestRequireFailsNow(t *testing.T) {
	r := &recorder{}
	require.Equal(r, 1, 1)
	require.NoError(r, nil)
	if r.failNow || len(r.errors) != 0 {
		t.Errorf("require failed on passing checks: %q", r.errors)
	}
	require.Equal(r, 1, 2)
	if !r.failNow || len(r.errors) != 1 {
		t.Errorf("require.Equal(1, 2): failNow=%v, errors %q", r.failNow, r.errors)
	}
	r = &recorder{}
	require.ErrorIs(r, nil, errSentinel)
	if !r.failNow {
		t.Error("require.ErrorIs on nil did not end the test")
	}
}
