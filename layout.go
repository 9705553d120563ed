package prioq

import "github.com/prioq/prioq/internal/store"

// Layout says how a queue stores its ready messages. It is fixed when the queue
// is created and stored in the queue's meta key.
//
// The zero Layout selects Levels(3).
type Layout struct {
	l store.Layout // the zero store.Layout: none chosen (Config's default applies)
}

// MaxLevels is the largest n for Levels(n) and the most segments for Range.
const MaxLevels = 64

// MaxRangePriority bounds Range layouts: priorities are stored as sorted-set
// scores (float64), which hold every integer of magnitude ≤ 2^53 exactly.
const MaxRangePriority = 1 << 53

// Levels is the layout for a small fixed set of priorities 0 … n-1 (n ≤ 64), one
// Redis list (a lane) per level. Push and pop are O(1). Priority n-1 is served
// first; messages of one priority are served first in, first out.
func Levels(n int) Layout { return Layout{store.Levels(n)} }

// Range is the layout for a wide integer priority range lo … hi (within ±2^53),
// split into `segments` equal bands (1..64). The highest priority is served
// first; messages of one priority are served first in, first out.
//
// Each band is a sorted set naming the priorities that have messages
// waiting, and each such priority a Redis list of its messages (see Key layout):
// a ready enqueue is an RPUSH and a ZADD, without Lua, and a waiting message
// costs Redis what a Levels one does (about 50 bytes beyond its payload)
// while priorities repeat. Finding the best priority is O(log p) in the
// priorities waiting. When nearly every waiting message has a priority of
// its own (deadlines as priorities, say), each costs a list of its own,
// about 350 bytes: RangeSorted is the layout for that.
func Range(lo, hi int64, segments int) Layout { return Layout{store.Range(lo, hi, segments)} }

// RangeSorted is Range with every message a member of its band's sorted set
// (seq‖envelope, score -priority; the sequence number, from the queue's seq
// counter, makes ties FIFO): about 150 bytes per waiting message whatever
// the priorities, but each enqueue runs a script (Redis CPU ~10× an RPUSH).
// It is the form every Range queue had before storage format 4: Open of a
// queue stored that way with Range finds it and serves it so, and a queue
// made with RangeSorted keeps that format (2, or 3 sharded).
func RangeSorted(lo, hi int64, segments int) Layout {
	return Layout{store.RangeSorted(lo, hi, segments)}
}

func (l Layout) withDefaults() Layout {
	if l.l.IsZero() {
		return Levels(DefaultLevels)
	}
	return l
}

// String gives the layout as it is written in the meta key and in errors.
func (l Layout) String() string { return l.l.String() }

// ParseLayout reads a layout as Layout.String writes it ("levels:3",
// "range:-100:100:8"), as stored in a queue's meta key; ErrInvalidLayout
// otherwise.
func ParseLayout(s string) (Layout, error) {
	l, err := store.ParseLayout(s)
	return Layout{l}, err
}
