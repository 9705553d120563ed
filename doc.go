// Package prioq is a multi-level priority queue over Redis.
//
// Producers enqueue messages with a priority and, optionally, a delay;
// consumers always get the highest-priority ready message first, first in,
// first out among equal priorities. Idle consumers block in Redis instead of
// polling, delayed messages are promoted exactly when due, and every key of a
// queue (or of each of its shards) shares one Redis Cluster hash tag.
//
// # Layouts
//
// Levels(n) keeps one Redis list (a lane) per priority 0 … n-1 (n ≤ 64): O(1)
// push and pop. Range(lo, hi, segments) splits a wide integer range (within
// ±2^53) into up to 64 equal bands, one sorted set per band naming the
// priorities waiting there, each priority a list of its messages: O(1) push,
// O(log p) to find the best of the p priorities waiting (storage format 4;
// RangeSorted keeps every message in its band's sorted set, the earlier
// form). Higher priority is served first in both. A consumer pops across all
// lanes with one multi-key command, highest lane first, so Redis itself
// gives strict priority and hands each message to exactly one waiting
// consumer.
//
// # Delivery modes
//
// AtLeastOnce (the default): one Lua call pops the best message and records a
// lease. A consumer that dies, or a reply lost on the network, leaves a lease
// that expires; the message is then delivered again, ahead of newer messages of
// its priority. Handlers Ack, Retry (with backoff) or Extend; after
// MaxAttempts a message goes to the dead-letter list with its last error.
// Acks are fenced by a lease token: an ack from a delivery whose lease expired
// fails with ErrLeaseLost and changes nothing.
//
// AtMostOnce: lanes are popped directly with BLPOP / BZPOPMIN (BLMPOP / BZMPOP
// for batches); a Range queue's consumers wait on the wake-up and take with
// the same Lua call, without a lease. No lease, no ack: what a crashed
// consumer held is lost.
//
// # Key layout
//
// Every key of queue Q starts with prioq:{Q}:, so that the whole queue lives
// in one cluster slot: its lanes, a delayed set and the store of delayed
// records, the ids of live caller-given ids, and for AtLeastOnce the leases,
// in-flight records, dead letters and wake-up marker. internal/store/keys.go
// describes each key, builds every name, and is the only place that does in
// Go; every script receives the keys it touches in KEYS, but those whose names it
// learns as it runs, which it builds from a key it was given (so they are in
// its slot): a Range priority's list (prio:P), the lanes a take reads in the
// filled index of a queue of many lanes, a group's list and keys, and the
// rate limits' keys and logs.
//
// A queue of N > 1 shards (Config.Shards) keeps its meta key, prioq:{Q}:meta,
// and puts every other key of shard i under prioq/i:{Q/k}:, where the tag Q/k
// is chosen so that the N tags' slots are spread evenly over the 16,384 (see
// Queue.ShardSlots): a cluster whose primaries hold equal runs of slots holds
// ⌊N/P⌋ or ⌈N/P⌉ shards on each of its P primaries, and every script still
// touches one slot.
//
// # Sharded queues
//
// Producers route a message to a shard by its OrderingKey (FNV-1a: messages
// with one key keep FIFO order among those of one priority), else by its ID
// (so an ID is idempotent queue-wide as long as every enqueue of it carries
// the same key, or none), or else in runs of 64 per shard in turn; a
// generated id names its shard, so acks, Cancel and RequeueDead go straight
// to it. A consumer keeps one blocking wait per shard (BZPOPMIN on the
// shard's wake-up set, whose score tells the best priority made ready) and
// takes from the shard it believes holds the best priority, never below what
// it believes the others hold: one consumer draining a queue gets strict
// priority order. Delays, retries, redeliveries and dead letters stay in
// their shard. Every Queue operation covers all shards; EnqueueBatch is
// atomic per shard, not across shards. Weights are refused with Shards > 1.
// On a Redis Cluster, build the client with LazyPools.
//
// # Many queues
//
// A MultiConsumer serves any number of AtLeastOnce queues (by name or
// pattern, strict or weighted across queues) on one connection per node: it
// subscribes (SSUBSCRIBE) to each served shard's channel, on which writes
// that make work ready announce it (SPUBLISH on the wake-up key's name, when
// the wake-up member is new), takes from the queues it heard of, and probes
// every queue every ProbeInterval (probe.lua) for what it missed, for due
// times and for expired leases, so it runs no loop per queue. NewConsumer and
// NewMultiConsumer refuse a consumer whose blocking connections the client's
// pool cannot hold beside its other consumers' (ErrPoolTooSmall).
//
// # Groups
//
// Group(key) puts a message in a group (a tenant): within a priority the
// groups with work are served in turn, first in, first out inside each,
// through one marker per group in the lane (its messages wait in a list of
// its own beside the lane). SetGroupLimit bounds a group's messages in
// flight across every consumer, counted by leases; a group at its limit is
// parked until one of its leases ends. Queue.Groups reports them.
// AtLeastOnce queues of Levels or Range only; see groups.go.
//
// # Rate limits
//
// GroupLimit.Rate bounds the messages of a group taken in any window of a
// given length, SetRateLimit those of the whole queue, on the Redis server's
// clock: sliding-window logs, exact in every window (rates.go). A group at
// its rate limit is parked and put back by a promoter when its next take is
// due; consumers of a queue at its limit sleep until then. Neither polls.
//
// # Periodic work, and work that must not run twice or late
//
// Queue.Schedule enqueues a message at each tick of a cron spec or an
// "@every d", each tick once, fired by whichever consumer's promoter comes
// first (schedfire.lua, a compare-and-set on the server's clock: no
// leader, no lock; docs/schedules.md). UniqueFor and UniqueKey refuse a
// second enqueue within a window even after the first was handled;
// Debounce and DebounceFirst fold a burst into one delayed message;
// StartBy and MaxWait dead-letter a message a consumer would start too
// late (docs/once.md).
//
// # A message's life
//
// Queue.Message finds a message by id in any state; with Config.Retain, or
// a result set by Message.SetResult, a finished one's record is kept, read
// by Queue.Result and waited for by Queue.WaitResult; Message.Progress
// reports progress, fenced by the lease (docs/results.md). Run renews its
// handlers' leases (ConsumerConfig.NoRenew), ends a handler after
// ConsumerConfig.HandlerTimeout, and Queue.Cancel stops a message in flight
// in any process (ErrCancelled; docs/guarantees.md).
//
// # Cost per operation
//
// Round trips (one Lua call or one pipeline each) and Redis commands, counting
// the commands a script runs:
//
//	Enqueue, ready, generated id           1 round trip; RPUSH, HINCRBY total, + ZADD wake-up for AtLeastOnce (no Lua);
//	                                       + for Range a ZADD naming the priority, both in one MULTI; + SPUBLISH while someone listens
//	Enqueue otherwise (delay, ID, RangeSorted) 1 round trip; one script, 3-5 commands
//	EnqueueBatch                           1 round trip for the whole batch (one script)
//	take, AtLeastOnce                      1 round trip; EVALSHA + LMPOP/ZMPOP, EXISTS, TIME, ZADD, HSET, ZADD wake-up
//	take, AtMostOnce                       1 round trip; BLPOP / BZPOPMIN (BLMPOP / BZMPOP for batches)
//	Ack, AckBatch                          1 round trip; ZREM + HDEL per message + HINCRBY, pipelined
//	                                       (ack.lua with a caller id); Run's acks of a queue of one shard,
//	                                       and AckAndReceive's, ride on the consumer's next take: the same
//	                                       commands, in the take's pipeline (no round trip of their own)
//	promotion                              1 round trip per batch of due messages
//	Cancel                                 1 round trip; delayed O(log n), ready O(depth): lanes are scanned
//	Close: what the consumer holds         1 round trip for all of them (release.lua, or a pipeline)
//
// Concurrent single calls on one Queue share round trips: an Enqueue of the
// first row, an Ack, and AtLeastOnce takes (of consumers without Weights,
// same Lease) that arrive while a call of their kind is in flight wait for
// it and then go together, as one pipeline or one script call; a lone call
// goes at once. Redis spends most of a small message's cost per round trip,
// so under concurrency this is most of the cost saved.
//
// # Failures
//
// No script can fail after its first write (Redis does not roll a script
// back): each one checks key types, record formats and counters first, cuts
// long argument lists into chunks, and writes first what frees memory, so at
// maxmemory (noeviction) takes, acks, retries, extends, sweeps and promotions
// keep running while enqueues are refused, and an enqueue that reports an
// error stored nothing. Batches are limited to MaxBatch messages per call.
//
// Every Redis call has a deadline (the caller's ctx, else Config.CallTimeout)
// and returns at it even when the client does not; background loops go on
// after a call that hangs, and Consumer.Close returns when its ctx ends. Use
// Dialer for the radix pools prioq runs on: it makes a pool drop half-open
// connections (see Dialer for why radix alone keeps them).
//
// # Headers, middleware, logs
//
// Headers (a string map, the Headers option) travel with a message through
// delays, retries, redeliveries and dead letters. ConsumerConfig.Middleware
// wraps Run's handler and Config.EnqueueMiddleware every enqueue, for
// tracing and metrics; Message.AfterFinish tells middleware what Run did once
// the handler returned (acked, retried, dead-lettered, unfinished);
// Config.Logger (log/slog) receives background errors, redeliveries, dead
// letters and corrupt messages with their attributes.
//
// # Conventions
//
// Every call that takes a ctx returns when ctx ends, and its doc says what
// then happened in Redis. Counts of stored messages are int64; sizes passed
// in (n of ReceiveBatch, Peek, DeadLetters) are int. A field of a config left
// at its zero value takes the Default* constant named in its doc. Peek and
// DeadLetters describe messages with MessageInfo; only a delivered *Message
// can be acknowledged.
//
// # Redis versions
//
// Redis 7.0 or newer: LMPOP / ZMPOP (AtLeastOnce takes) and BLMPOP / BZMPOP
// (AtMostOnce batch receives) are 7.0 commands. BLPOP and BZPOPMIN (single
// AtMostOnce receives) work on 5.0, and ZADD LT (the wake-up's priority) on
// 6.2, but the queue as a whole needs 7.0. Sharded queues need nothing more:
// Redis Cluster 7.0, or one Redis for tests.
//
// # Clocks
//
// Every time that decides something, a lease deadline, the due time of
// Delay(d) or of a retry, the "now" of a sweep or a promotion, is the Redis
// server's (TIME inside the scripts), so a host with a wrong clock cannot
// expire another consumer's lease or promote early. At(t) is the caller's
// wall time. Host clocks stamp only generated ids and EnqueuedAt.
//
// # Replication
//
// Config.WaitReplicas makes every write that acknowledges something wait for
// that many replicas (WAIT); see ErrNotReplicated.
package prioq
