package store

import "fmt"

// The Levels layout (layout.go): level p is lane p, a Redis list of the
// envelopes of priority p, oldest first. A take pops the first non-empty
// list, highest level first, with one multi-key command (take.lua, or BLPOP /
// BLMPOP for AtMostOnce).

// MaxLevels is the largest n for Levels(n) and the most segments for Range.
const MaxLevels = 64

// validateLevels checks the n of Levels(n).
func validateLevels(n int) error {
	if n < 1 || n > MaxLevels {
		return fmt.Errorf("%w: Levels(%d): want 1..%d levels", ErrInvalidLayout, n, MaxLevels)
	}
	return nil
}

// levelOf is the lane of priority p in Levels(n): p itself.
func levelOf(n int, p int64) (int, error) {
	if p < 0 || p >= int64(n) {
		return 0, fmt.Errorf("%w: %d is outside Levels(%d) (0..%d)", ErrInvalidPriority, p, n, n-1)
	}
	return int(p), nil
}
