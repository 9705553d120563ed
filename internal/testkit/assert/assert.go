// Package assert holds the checks prioq's root tests use. They report a
// failure with t.Errorf and return whether the check held; package require
// has the same checks ending the test instead.
//
// The root module keeps radix as its only dependency, tests included, so that
// a program importing prioq gets radix and radix's own requirements and
// nothing else; these few checks are the part of a test library it needs.
package assert

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fail reports what was wrong, then the caller's optional message: either a
// format with arguments or a single value.
func fail(t testing.TB, what string, msg []any) bool {
	t.Helper()
	if m := message(msg); m != "" {
		what += "\n\tmessage: " + m
	}
	t.Errorf("%s", what)
	return false
}

func message(msg []any) string {
	switch {
	case len(msg) == 0:
		return ""
	case len(msg) == 1:
		return fmt.Sprint(msg[0])
	default:
		if f, ok := msg[0].(string); ok {
			return fmt.Sprintf(f, msg[1:]...)
		}
		return fmt.Sprint(msg...)
	}
}

// equal compares like reflect.DeepEqual, except that byte slices compare by
// content (nil equals empty).
func equal(want, got any) bool {
	if w, ok := want.([]byte); ok {
		if g, ok := got.([]byte); ok {
			return bytes.Equal(w, g)
		}
		return false
	}
	return reflect.DeepEqual(want, got)
}

// Equal checks that got equals want (same type, deeply equal).
func Equal(t testing.TB, want, got any, msg ...any) bool {
	t.Helper()
	if equal(want, got) {
		return true
	}
	return fail(t, fmt.Sprintf("not equal:\n\twant: %s\n\tgot:  %s", show(want, got), show(got, want)), msg)
}

// show prints v, with its type when it prints like other (1 and int64(1)).
func show(v, other any) string {
	s := fmt.Sprintf("%#v", v)
	if s == fmt.Sprintf("%#v", other) {
		s = fmt.Sprintf("%T(%s)", v, s)
	}
	return s
}

// NotEqual checks that got differs from bad.
func NotEqual(t testing.TB, bad, got any, msg ...any) bool {
	t.Helper()
	if !equal(bad, got) {
		return true
	}
	return fail(t, fmt.Sprintf("should differ from %#v", bad), msg)
}

// EqualValues checks that got equals want once converted to want's type
// (int64(3) and 3 are equal values).
func EqualValues(t testing.TB, want, got any, msg ...any) bool {
	t.Helper()
	if equal(want, got) {
		return true
	}
	if want != nil && got != nil {
		// Equal once converted either way: 3 and 3.5 differ although 3.5
		// converts to 3.
		wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
		if gv.Type().ConvertibleTo(wv.Type()) && wv.Type().ConvertibleTo(gv.Type()) &&
			isNumber(wv.Kind()) == isNumber(gv.Kind()) &&
			reflect.DeepEqual(want, gv.Convert(wv.Type()).Interface()) &&
			reflect.DeepEqual(got, wv.Convert(gv.Type()).Interface()) {
			return true
		}
	}
	return fail(t, fmt.Sprintf("not equal values:\n\twant: %#v\n\tgot:  %#v", want, got), msg)
}

func isNumber(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Float64
}

// True checks that v is true.
func True(t testing.TB, v bool, msg ...any) bool {
	t.Helper()
	if v {
		return true
	}
	return fail(t, "should be true", msg)
}

// False checks that v is false.
func False(t testing.TB, v bool, msg ...any) bool {
	t.Helper()
	if !v {
		return true
	}
	return fail(t, "should be false", msg)
}

// NoError checks that err is nil.
func NoError(t testing.TB, err error, msg ...any) bool {
	t.Helper()
	if err == nil {
		return true
	}
	return fail(t, fmt.Sprintf("unexpected error: %v", err), msg)
}

// Error checks that err is not nil.
func Error(t testing.TB, err error, msg ...any) bool {
	t.Helper()
	if err != nil {
		return true
	}
	return fail(t, "an error was expected", msg)
}

// ErrorIs checks that errors.Is(err, target).
func ErrorIs(t testing.TB, err, target error, msg ...any) bool {
	t.Helper()
	if errors.Is(err, target) {
		return true
	}
	return fail(t, fmt.Sprintf("error %v\n\tis not: %v", err, target), msg)
}

// ErrorContains checks that err is not nil and its text contains part.
func ErrorContains(t testing.TB, err error, part string, msg ...any) bool {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), part) {
		return true
	}
	return fail(t, fmt.Sprintf("error %v\n\tdoes not contain %q", err, part), msg)
}

// isZero: nil, or the zero value of its type.
func isZero(v any) bool {
	return v == nil || reflect.ValueOf(v).IsZero()
}

// Zero checks that v is nil or the zero value of its type.
func Zero(t testing.TB, v any, msg ...any) bool {
	t.Helper()
	if isZero(v) {
		return true
	}
	return fail(t, fmt.Sprintf("should be zero: %#v", v), msg)
}

// NotZero checks that v is neither nil nor the zero value of its type.
func NotZero(t testing.TB, v any, msg ...any) bool {
	t.Helper()
	if !isZero(v) {
		return true
	}
	return fail(t, fmt.Sprintf("should not be zero: %#v", v), msg)
}

// isEmpty: zero, or a string, slice, map, array or channel of length 0, or a
// pointer to something empty.
func isEmpty(v any) bool {
	if isZero(v) {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array, reflect.Chan:
		return rv.Len() == 0
	case reflect.Pointer:
		return isEmpty(rv.Elem().Interface())
	}
	return false
}

// Empty checks that v is empty (see isEmpty).
func Empty(t testing.TB, v any, msg ...any) bool {
	t.Helper()
	if isEmpty(v) {
		return true
	}
	return fail(t, fmt.Sprintf("should be empty: %#v", v), msg)
}

// NotEmpty checks that v is not empty.
func NotEmpty(t testing.TB, v any, msg ...any) bool {
	t.Helper()
	if !isEmpty(v) {
		return true
	}
	return fail(t, fmt.Sprintf("should not be empty: %#v", v), msg)
}

// Len checks that v (string, slice, map, array, channel) has n elements.
func Len(t testing.TB, v any, n int, msg ...any) bool {
	t.Helper()
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array, reflect.Chan:
		if rv.Len() == n {
			return true
		}
		return fail(t, fmt.Sprintf("length %d, want %d: %#v", rv.Len(), n, v), msg)
	}
	return fail(t, fmt.Sprintf("%T has no length", v), msg)
}

// Contains checks that a string holds a substring, a slice or array holds an
// element, or a map holds a key.
func Contains(t testing.TB, in, elem any, msg ...any) bool {
	t.Helper()
	rv := reflect.ValueOf(in)
	switch rv.Kind() {
	case reflect.String:
		if s, ok := elem.(string); ok && strings.Contains(rv.String(), s) {
			return true
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			if equal(rv.Index(i).Interface(), elem) {
				return true
			}
		}
	case reflect.Map:
		for _, k := range rv.MapKeys() {
			if equal(k.Interface(), elem) {
				return true
			}
		}
	}
	return fail(t, fmt.Sprintf("%#v does not contain %#v", in, elem), msg)
}

// compare orders two values of one ordered kind: -1, 0, 1; ok is false when
// they are not comparable so.
func compare(a, b any) (int, bool) {
	av, bv := reflect.ValueOf(a), reflect.ValueOf(b)
	if a == nil || b == nil || av.Type() != bv.Type() {
		return 0, false
	}
	sign := func(less, greater bool) int {
		switch {
		case less:
			return -1
		case greater:
			return 1
		}
		return 0
	}
	switch av.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return sign(av.Int() < bv.Int(), av.Int() > bv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return sign(av.Uint() < bv.Uint(), av.Uint() > bv.Uint()), true
	case reflect.Float32, reflect.Float64:
		return sign(av.Float() < bv.Float(), av.Float() > bv.Float()), true
	case reflect.String:
		return strings.Compare(av.String(), bv.String()), true
	}
	return 0, false
}

func ordered(t testing.TB, a, b any, want func(int) bool, rel string, msg []any) bool {
	t.Helper()
	c, ok := compare(a, b)
	if !ok {
		return fail(t, fmt.Sprintf("cannot order %#v and %#v (types %T, %T)", a, b, a, b), msg)
	}
	if want(c) {
		return true
	}
	return fail(t, fmt.Sprintf("%v should be %s %v", a, rel, b), msg)
}

// Less checks that a < b (same ordered type).
func Less(t testing.TB, a, b any, msg ...any) bool {
	t.Helper()
	return ordered(t, a, b, func(c int) bool { return c < 0 }, "less than", msg)
}

// LessOrEqual checks that a <= b.
func LessOrEqual(t testing.TB, a, b any, msg ...any) bool {
	t.Helper()
	return ordered(t, a, b, func(c int) bool { return c <= 0 }, "at most", msg)
}

// Greater checks that a > b.
func Greater(t testing.TB, a, b any, msg ...any) bool {
	t.Helper()
	return ordered(t, a, b, func(c int) bool { return c > 0 }, "greater than", msg)
}

// GreaterOrEqual checks that a >= b.
func GreaterOrEqual(t testing.TB, a, b any, msg ...any) bool {
	t.Helper()
	return ordered(t, a, b, func(c int) bool { return c >= 0 }, "at least", msg)
}

// NotPanics checks that f returns without panicking.
func NotPanics(t testing.TB, f func(), msg ...any) (ok bool) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			ok = fail(t, fmt.Sprintf("panicked: %v", r), msg)
		}
	}()
	f()
	return true
}

// Eventually checks that cond returns true within waitFor, calling it every
// tick (the first time at once).
func Eventually(t testing.TB, cond func() bool, waitFor, tick time.Duration, msg ...any) bool {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return fail(t, fmt.Sprintf("condition not met within %v", waitFor), msg)
		}
		time.Sleep(tick)
	}
}
