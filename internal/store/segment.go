package store

import (
	"fmt"
	"math/bits"
	"strconv"
)

// MaxRangePriority bounds Range layouts: priorities are stored as sorted-set
// scores (float64), which hold every integer of magnitude ≤ 2^53 exactly.
const MaxRangePriority = 1 << 53

// The Range layout (layout.go): the priorities lo … hi in `segments` equal
// bands, each a sorted set. Inside a segment a message is the member
// seq‖envelope with score -priority: ZPOPMIN takes the highest priority, and
// among equal scores Redis orders members bytewise, so the 8-byte big-endian
// sequence number (from the queue's seq counter when the message becomes
// ready) makes ties first in, first out.

// validateRange checks the arguments of Range(lo, hi, segments).
func validateRange(lo, hi int64, segments int) error {
	switch {
	case lo > hi:
		return fmt.Errorf("%w: Range(%d, %d): lo > hi", ErrInvalidLayout, lo, hi)
	case lo < -MaxRangePriority || hi > MaxRangePriority:
		return fmt.Errorf("%w: Range(%d, %d): bounds beyond ±2^53", ErrInvalidLayout, lo, hi)
	case segments < 1 || segments > MaxLevels:
		return fmt.Errorf("%w: Range: %d segments (want 1..%d)", ErrInvalidLayout, segments, MaxLevels)
	case uint64(hi-lo) < uint64(segments-1):
		return fmt.Errorf("%w: Range(%d, %d): more segments (%d) than priorities", ErrInvalidLayout, lo, hi, segments)
	}
	return nil
}

// segmentOf returns floor((p-lo) * segments / (hi-lo+1)) computed in 128 bits,
// so every band has the same width (±1) and no product overflows.
func segmentOf(lo, hi int64, segments int, p int64) (int, error) {
	if p < lo || p > hi {
		return 0, fmt.Errorf("%w: %d is outside Range(%d, %d)", ErrInvalidPriority, p, lo, hi)
	}
	off := uint64(p - lo)
	width := uint64(hi-lo) + 1 // ≤ 2^54+1, no overflow
	h, l := bits.Mul64(off, uint64(segments))
	q, _ := bits.Div64(h, l, width) // h < width because off < width
	return int(q), nil
}

// scoreOf is the sorted-set score of priority p, as Redis will parse it.
func scoreOf(p int64) string { return strconv.FormatInt(-p, 10) }

// segmentEnvelope is the envelope in a segment's member seq‖envelope.
func segmentEnvelope(member []byte) ([]byte, error) {
	if len(member) < seqLen {
		return nil, fmt.Errorf("%w: segment member of %d bytes", ErrCorrupt, len(member))
	}
	return member[seqLen:], nil
}

// priorityOfScore inverts scoreOf for a score Redis sends back.
func priorityOfScore(s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != f || f > MaxRangePriority || f < -MaxRangePriority || f != float64(int64(f)) {
		return 0, fmt.Errorf("%w: score %q is not a priority", ErrCorrupt, s)
	}
	return -int64(f), nil
}
