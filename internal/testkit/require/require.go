// Package require holds the checks of package assert, ending the test
// (t.FailNow) when one does not hold.
package require

import (
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
)

// Equal: see assert.Equal.
func Equal(t testing.TB, want, got any, msg ...any) {
	t.Helper()
	if !assert.Equal(t, want, got, msg...) {
		t.FailNow()
	}
}

// NotEqual: see assert.NotEqual.
func NotEqual(t testing.TB, bad, got any, msg ...any) {
	t.Helper()
	if !assert.NotEqual(t, bad, got, msg...) {
		t.FailNow()
	}
}

// EqualValues: see assert.EqualValues.
func EqualValues(t testing.TB, want, got any, msg ...any) {
	t.Helper()
	if !assert.EqualValues(t, want, got, msg...) {
		t.FailNow()
	}
}

// True: see assert.True.
func True(t testing.TB, v bool, msg ...any) {
	t.Helper()
	if !assert.True(t, v, msg...) {
		t.FailNow()
	}
}

// False: see assert.False.
func False(t testing.TB, v bool, msg ...any) {
	t.Helper()
	if !assert.False(t, v, msg...) {
		t.FailNow()
	}
}

// NoError: see assert.NoError.
func NoError(t testing.TB, err error, msg ...any) {
	t.Helper()
	if !assert.NoError(t, err, msg...) {
		t.FailNow()
	}
}

// Error: see assert.Error.
func Error(t testing.TB, err error, msg ...any) {
	t.Helper()
	if !assert.Error(t, err, msg...) {
		t.FailNow()
	}
}

// ErrorIs: see assert.ErrorIs.
func ErrorIs(t testing.TB, err, target error, msg ...any) {
	t.Helper()
	if !assert.ErrorIs(t, err, target, msg...) {
		t.FailNow()
	}
}

// ErrorContains: see assert.ErrorContains.
func ErrorContains(t testing.TB, err error, part string, msg ...any) {
	t.Helper()
	if !assert.ErrorContains(t, err, part, msg...) {
		t.FailNow()
	}
}

// Zero: see assert.Zero.
func Zero(t testing.TB, v any, msg ...any) {
	t.Helper()
	if !assert.Zero(t, v, msg...) {
		t.FailNow()
	}
}

// NotZero: see assert.NotZero.
func NotZero(t testing.TB, v any, msg ...any) {
	t.Helper()
	if !assert.NotZero(t, v, msg...) {
		t.FailNow()
	}
}

// Empty: see assert.Empty.
func Empty(t testing.TB, v any, msg ...any) {
	t.Helper()
	if !assert.Empty(t, v, msg...) {
		t.FailNow()
	}
}

// NotEmpty: see assert.NotEmpty.
func NotEmpty(t testing.TB, v any, msg ...any) {
	t.Helper()
	if !assert.NotEmpty(t, v, msg...) {
		t.FailNow()
	}
}

// Len: see assert.Len.
func Len(t testing.TB, v any, n int, msg ...any) {
	t.Helper()
	if !assert.Len(t, v, n, msg...) {
		t.FailNow()
	}
}

// Contains: see assert.Contains.
func Contains(t testing.TB, in, elem any, msg ...any) {
	t.Helper()
	if !assert.Contains(t, in, elem, msg...) {
		t.FailNow()
	}
}

// Less: see assert.Less.
func Less(t testing.TB, a, b any, msg ...any) {
	t.Helper()
	if !assert.Less(t, a, b, msg...) {
		t.FailNow()
	}
}

// LessOrEqual: see assert.LessOrEqual.
func LessOrEqual(t testing.TB, a, b any, msg ...any) {
	t.Helper()
	if !assert.LessOrEqual(t, a, b, msg...) {
		t.FailNow()
	}
}

// Greater: see assert.Greater.
func Greater(t testing.TB, a, b any, msg ...any) {
	t.Helper()
	if !assert.Greater(t, a, b, msg...) {
		t.FailNow()
	}
}

// GreaterOrEqual: see assert.GreaterOrEqual.
func GreaterOrEqual(t testing.TB, a, b any, msg ...any) {
	t.Helper()
	if !assert.GreaterOrEqual(t, a, b, msg...) {
		t.FailNow()
	}
}

// NotPanics: see assert.NotPanics.
func NotPanics(t testing.TB, f func(), msg ...any) {
	t.Helper()
	if !assert.NotPanics(t, f, msg...) {
		t.FailNow()
	}
}

// Eventually: see assert.Eventually.
func Eventually(t testing.TB, cond func() bool, waitFor, tick time.Duration, msg ...any) {
	t.Helper()
	if !assert.Eventually(t, cond, waitFor, tick, msg...) {
		t.FailNow()
	}
}
