package store

import (
	"fmt"
	"strings"
)

// Layout says how a queue stores its ready messages. It is fixed when the queue
// is created and stored in the queue's meta key. The root's public Layout
// wraps one; the zero Layout is none (the root selects its default).
type Layout struct {
	kind     layoutKind
	levels   int
	lo, hi   int64
	segments int

	// seqMembers: Range whose segments hold the messages as seq‖envelope
	// (RangeSorted; every Range queue stored before format 4, as Open finds
	// in the meta key). String ignores it: the meta key's format says it.
	seqMembers bool

	// unfilled: Levels of more than filledLanes lanes stored before format 5
	// (as Open finds in the meta key): no filled index names its lanes, and
	// takes pop over every lane. String ignores it too.
	unfilled bool
}

type layoutKind uint8

const (
	kindLevels layoutKind = iota + 1
	kindRange
)

// Levels is the layout for a small fixed set of priorities 0 … n-1 (n ≤ 64), one
// Redis list (a lane) per level. Push and pop are O(1). Priority n-1 is served
// first; messages of one priority are served first in, first out.
func Levels(n int) Layout { return Layout{kind: kindLevels, levels: n} }

// Range is the layout for a wide integer priority range lo … hi (within ±2^53),
// split into `segments` equal bands (1..64). The highest priority is served
// first; messages of one priority are served first in, first out.
//
// Each band is a sorted set naming the priorities that have messages
// waiting, and each such priority a Redis list of its messages (keys.go):
// a ready enqueue is an RPUSH and a ZADD, without Lua, and a waiting message
// costs Redis what a Levels one does (about 50 bytes beyond its payload)
// while priorities repeat. Finding the best priority is O(log p) in the
// priorities waiting. When nearly every waiting message has a priority of
// its own (deadlines as priorities, say), each costs a list of its own,
// about 350 bytes: RangeSorted is the layout for that.
func Range(lo, hi int64, segments int) Layout {
	return Layout{kind: kindRange, lo: lo, hi: hi, segments: segments}
}

// RangeSorted is Range with every message a member of its band's sorted set
// (seq‖Envelope, score -priority; the sequence number, from the queue's seq
// counter, makes ties FIFO): about 150 bytes per waiting message whatever
// the priorities, but each enqueue runs a script (Redis CPU ~10× an RPUSH).
// It is the form every Range queue had before storage format 4: Open of a
// queue stored that way with Range finds it and serves it so, and a queue
// made with RangeSorted keeps that format (2, or 3 sharded).
func RangeSorted(lo, hi int64, segments int) Layout {
	l := Range(lo, hi, segments)
	l.seqMembers = true
	return l
}

// IsZero reports whether l is the zero Layout (none chosen).
func (l Layout) IsZero() bool { return l.kind == 0 }

// Validate refuses a layout that cannot be built (ErrInvalidLayout).
func (l Layout) Validate() error { return l.validate() }

func (l Layout) validate() error {
	switch l.kind {
	case kindLevels:
		return validateLevels(l.levels)
	case kindRange:
		return validateRange(l.lo, l.hi, l.segments)
	}
	return fmt.Errorf("%w: unknown layout kind %d", ErrInvalidLayout, l.kind)
}

func (l Layout) isRange() bool { return l.kind == kindRange }

// lowest and highest are the layout's priorities at its ends.
func (l Layout) lowest() int64 {
	if l.kind == kindRange {
		return l.lo
	}
	return 0
}

func (l Layout) highest() int64 {
	if l.kind == kindRange {
		return l.hi
	}
	return int64(l.levels - 1)
}

// lanes is how many Redis keys hold ready messages.
func (l Layout) lanes() int {
	if l.kind == kindRange {
		return l.segments
	}
	return l.levels
}

// laneOf maps a priority to its lane; lane lanes()-1 is served first.
func (l Layout) laneOf(p int64) (int, error) {
	if l.kind == kindRange {
		return segmentOf(l.lo, l.hi, l.segments, p)
	}
	return levelOf(l.levels, p)
}

// defaultPriority is what Enqueue uses without a Priority option: 0 when the
// layout holds it, else the lowest priority of the range.
func (l Layout) defaultPriority() int64 {
	if l.kind == kindRange && (l.lo > 0 || l.hi < 0) {
		return l.lo
	}
	return 0
}

// IsRange, Lowest, Highest, Lanes, LaneOf and DefaultPriority are the
// layout's figures for the layers above (see their lower-case forms).
func (l Layout) IsRange() bool               { return l.isRange() }
func (l Layout) Lowest() int64               { return l.lowest() }
func (l Layout) Highest() int64              { return l.highest() }
func (l Layout) Lanes() int                  { return l.lanes() }
func (l Layout) LaneOf(p int64) (int, error) { return l.laneOf(p) }
func (l Layout) DefaultPriority() int64      { return l.defaultPriority() }

// SeqMembers reports whether the segments of a Range hold seq‖envelope
// members (RangeSorted, and Range stored before format 4).
func (l Layout) SeqMembers() bool { return l.seqMembers }

// Unfilled reports whether Open found the queue stored before its filled
// index existed (format 5): no index names its lanes.
func (l Layout) Unfilled() bool { return l.unfilled }

// Stored is the layout as users see it: without the marks of how Open found
// it stored (unfilled) that String ignores too.
func (l Layout) Stored() Layout {
	l.unfilled = false
	return l
}

// String gives the layout as it is written in the meta key and in errors.
func (l Layout) String() string {
	switch l.kind {
	case kindLevels:
		return fmt.Sprintf("levels:%d", l.levels)
	case kindRange:
		return fmt.Sprintf("range:%d:%d:%d", l.lo, l.hi, l.segments)
	}
	return "invalid"
}

// ParseLayout reads a layout as Layout.String writes it ("levels:3",
// "range:-100:100:8"), as stored in a queue's meta key; ErrInvalidLayout
// otherwise.
func ParseLayout(s string) (Layout, error) {
	var l Layout
	var a, b, c int64
	switch {
	case strings.HasPrefix(s, "levels:"):
		if _, err := fmt.Sscanf(s, "levels:%d", &a); err == nil {
			l = Levels(int(a))
		}
	case strings.HasPrefix(s, "range:"):
		if _, err := fmt.Sscanf(s, "range:%d:%d:%d", &a, &b, &c); err == nil {
			l = Range(a, b, int(c))
		}
	}
	// Only what String writes: no padding, no trailing bytes.
	if l.kind == 0 || l.String() != s {
		return Layout{}, fmt.Errorf("%w: %q", ErrInvalidLayout, s)
	}
	if err := l.validate(); err != nil {
		return Layout{}, err
	}
	return l, nil
}
