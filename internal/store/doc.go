// Package store is one shard's Redis: every Redis command prioq sends goes
// through it. A Shard holds the keys of one hash tag (keys.go, the one
// description of the key layout) and has one method per Redis operation:
// the producer's Send, the consumer's Take and TakeShared, the lease's Ack,
// AckBatch, Fail, Release and Extend, promotions (PromoteDue, Promote,
// NextDue) and sweeps (Sweep), a queue's operations (Stats, Peek, Cancel,
// Purge, Pause, Resume, DeadLetters, DeadOp, GroupCounts, SetGroupLimit,
// SetRate, Rate, Top; browsing: ScheduledIndex/ScheduledOf, LeasedIndex/
// LeasedOf, RunNow; Find, a message by id in any state; the history: HasSample, AddSample, History), its meta key (WriteMeta, KeepMeta, CheckEviction),
// and the waits and wake-ups of its consumers (WaitWake, WaitAny, WaitSched,
// RearmWake, RearmSched, PutWake, Poke, PopLanes, WrongLanes, PutBack,
// ReleaseIDs). What spans many shards of a node or a whole client is a
// function: Probe, Listen (a Subscription), ScanQueues and NameGlob,
// ReadMeta, Borrow, Nodes, SyncTopology, and the worker registry
// (workers.go: Heartbeat, Goodbye, Workers; its keys share a hash tag of
// their own).
//
// Every call has a deadline and returns by it (call.go: do, with retries of
// cluster redirects); concurrent single calls of one kind are merged into
// one round trip (coalesce.go). The stored message is the envelope
// (envelope.go); the Lua scripts (lua/, lua.go) share their constants with
// Go through protocol.go.
//
// It imports neither the root package nor internal/consume (a root test
// checks): the layers above speak to Redis only through it.
package store
