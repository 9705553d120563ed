package store

import "time"

// requests.go: the values the shard's calls take and give back, among them
// what its merged calls carry (coalesce.go), and the bounds of a merged call.

// Item is one validated message, ready to go to its shard: the root's
// Enqueue builds it from the caller's options.
type Item struct {
	ID       string
	Caller   bool   // the id is the caller's (kept unique by the ids set)
	Grouped  bool   // of a group: stored by a script (lua/inc/grouppush.lua group_push)
	Due      string // "" ready now, else DueIn's or DueAt's form
	Lane     int
	Priority int64
	Score    string // a Range's: ScoreOf(Priority); "" for Levels
	Env      []byte // the encoded envelope
	// Once is the message's unique window or debounce (OnceOf), or the
	// zero Once.
	Once Once
}

// Once is what enqueue.lua's once field says of a message
// (lua/inc/once.lua): a unique window of Window on Key (Debounce false), or
// a debounce of Key by Window (First: the first message stays, else the
// last replaces it). The key is the caller's, not yet a Redis key.
type Once struct {
	Key      string
	Window   time.Duration
	Debounce bool
	First    bool
}

// Result is what Send reports for one Item, at the same index: its id, and
// ErrDuplicate when a live message already has it (or its unique window is
// open). Folded says the id is that of the pending message of its debounce
// key, into which it went (Once.First).
type Result struct {
	ID     string
	Err    error
	Folded bool
}

// plainResult is a merged enqueue's outcome for one caller.
type plainResult struct {
	res Result // ID set when the message is stored
	err error
}

// Bounds of one merged enqueue: a reply per lane, so the count only bounds
// the call's size; the bytes keep large messages from making one huge request.
const (
	maxMergedEnqueues     = 256
	maxMergedEnqueueBytes = 1 << 20
)

// AckReq is what an ack needs of a delivery: its lease token, its message's
// id, and whether that id is the caller's (to release).
type AckReq struct {
	Token, ID string
	Caller    bool
	Group     string // "" for none
}

// Bounds of one merged ack call (two commands per message in a pipeline).
const maxMergedAcks = 256

// MaxMergedAcks is the most acks one merged call carries (see Ack).
const MaxMergedAcks = maxMergedAcks
