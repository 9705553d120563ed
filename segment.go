package prioq

import (
	"fmt"
	"math/bits"
	"strconv"
)

// MaxRangePriority bounds Range layouts: priorities are stored as sorted-set
// scores (float64), which hold every integer of magnitude ≤ 2^53 exactly.
const MaxRangePriority = 1 << 53

// Range is the layout for a wide integer priority range lo … hi (within ±2^53),
// split into `segments` equal bands (1..64), one Redis sorted set per band.
// Push and pop are O(log n). The highest priority is served first; messages of
// one priority are served first in, first out.
//
// Inside a segment a message is the member seq‖envelope with score -priority:
// ZPOPMIN takes the highest priority, and among equal scores Redis orders
// members bytewise, so the 8-byte big-endian sequence number (taken from the
// queue's seq counter when the message becomes ready) makes ties FIFO.
func Range(lo, hi int64, segments int) Layout {
	return Layout{kind: kindRange, lo: lo, hi: hi, segments: segments}
}

func (l Layout) validateRange() error {
	switch {
	case l.lo > l.hi:
		return fmt.Errorf("%w: Range(%d, %d): lo > hi", ErrInvalidLayout, l.lo, l.hi)
	case l.lo < -MaxRangePriority || l.hi > MaxRangePriority:
		return fmt.Errorf("%w: Range(%d, %d): bounds beyond ±2^53", ErrInvalidLayout, l.lo, l.hi)
	case l.segments < 1 || l.segments > MaxLevels:
		return fmt.Errorf("%w: Range: %d segments (want 1..%d)", ErrInvalidLayout, l.segments, MaxLevels)
	case uint64(l.hi-l.lo) < uint64(l.segments-1):
		return fmt.Errorf("%w: Range(%d, %d): more segments (%d) than priorities", ErrInvalidLayout, l.lo, l.hi, l.segments)
	}
	return nil
}

// segmentOf returns floor((p-lo) * segments / (hi-lo+1)) computed in 128 bits,
// so every band has the same width (±1) and no product overflows.
func (l Layout) segmentOf(p int64) (int, error) {
	if p < l.lo || p > l.hi {
		return 0, fmt.Errorf("%w: %d is outside Range(%d, %d)", ErrInvalidPriority, p, l.lo, l.hi)
	}
	off := uint64(p - l.lo)
	width := uint64(l.hi-l.lo) + 1 // ≤ 2^54+1, no overflow
	h, lo := bits.Mul64(off, uint64(l.segments))
	q, _ := bits.Div64(h, lo, width) // h < width because off < width
	return int(q), nil
}

// scoreOf is the sorted-set score of priority p, as Redis will parse it.
func scoreOf(p int64) string { return strconv.FormatInt(-p, 10) }

// priorityOfScore inverts scoreOf for a score Redis sends back.
func priorityOfScore(s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != f || f > MaxRangePriority || f < -MaxRangePriority || f != float64(int64(f)) {
		return 0, fmt.Errorf("%w: score %q is not a priority", ErrCorrupt, s)
	}
	return -int64(f), nil
}
