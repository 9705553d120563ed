package prioq

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// A radix pool has a fixed number of connections, and a blocking command
// (BLPOP, BZPOPMIN, ...) holds one of them for as long as it waits. Consumers
// that together wait on every connection of a pool leave nothing for any
// other call: enqueues, acks and the consumers' own takes wait until their
// deadlines, and nothing said the pool was too small. So NewConsumer checks,
// before it starts anything, that the pool of every node the consumer will
// wait on can give, at the same time, the blocking connections of every
// consumer of the client that are not waiting right now, the new consumer's,
// and one more for everything else; if it cannot within poolCheckWait, it
// refuses with ErrPoolTooSmall. The accounting is per client and per node
// (a Cluster client has a pool per primary).

// poolCheckWait bounds how long NewConsumer waits for the connections it
// borrows: other calls hold connections for milliseconds, a blocking wait
// for seconds.
const poolCheckWait = 500 * time.Millisecond

// poolUse is what the consumers of one client hold on one node's pool.
type poolUse struct {
	reserved  int          // blocking connections of the live consumers (under blockingMu)
	consumers int          // how many consumers (and MultiConsumers) hold them (under blockingMu)
	inUse     atomic.Int64 // of those, waiting in Redis right now

	// The last refusal (under blockingMu): with as many reserved and a need
	// as large, the next consumer is refused without borrowing again, for
	// refusalKept (a borrow that fails holds the free connections for
	// poolCheckWait, which every other call waits out); a consumer closing
	// clears it. It expires: the program's own calls may have held the
	// connections that were missing.
	refusedAt, refusedNeed  int
	refusedUntil            time.Time
	refusedGot, refusedWant int // how many connections that check got at once, of how many
}

// refusalKept is how long a refusal answers for the pool without a borrow.
const refusalKept = 2 * time.Second

var (
	blockingMu sync.Mutex
	blocking   = map[Client]map[string]*poolUse{}
)

// accountable reports whether c can key the accounting: a client that
// cannot (a func adapter) is not accounted, and not checked.
func accountable(c Client) bool { return reflect.TypeOf(c).Comparable() }

// usesOf returns the accounting of client c on node (created if new).
// Callers hold blockingMu.
func usesOf(c Client, node string) *poolUse {
	byNode := blocking[c]
	if byNode == nil {
		byNode = map[string]*poolUse{}
		blocking[c] = byNode
	}
	u := byNode[node]
	if u == nil {
		u = &poolUse{}
		byNode[node] = u
	}
	return u
}

// blockingNeed is one node's part of a consumer's blocking connections: how
// many, and a key of that node for borrowing connections of its pool.
type blockingNeed struct {
	node, key string
	n         int
	use       *poolUse
}

// reserveBlocking checks that the pools can hold the consumer's blocking
// connections (see above) and reserves them; release gives them back on Close.
func reserveBlocking(ctx context.Context, c Client, what string, needs []blockingNeed) (release func(), err error) {
	if !accountable(c) {
		return func() {}, nil
	}
	blockingMu.Lock()
	defer blockingMu.Unlock()
	for i := range needs {
		nd := &needs[i]
		nd.use = usesOf(c, nd.node)
		idle := nd.use.reserved - int(nd.use.inUse.Load()) // reserved, not waiting now: will want a connection
		want := max(idle, 0) + nd.n + 1
		if nd.use.refusedNeed > 0 && nd.use.reserved >= nd.use.refusedAt && nd.n >= nd.use.refusedNeed &&
			time.Now().Before(nd.use.refusedUntil) {
			// Refused a moment ago with no more room than now: not borrowed
			// again (a borrow that fails holds every free connection for
			// poolCheckWait, which every other call waits out).
			when := ", in a check just now"
			if ago := time.Since(nd.use.refusedUntil.Add(-refusalKept)).Round(time.Millisecond); ago > 0 {
				when = fmt.Sprintf(", in a check %v ago", ago)
			}
			return nil, poolTooSmall(what, nd, nd.use.refusedGot, nd.use.refusedWant, when)
		}
		if got := borrow(ctx, c, nd.key, want); got < want {
			nd.use.refusedAt, nd.use.refusedNeed, nd.use.refusedUntil = nd.use.reserved, nd.n, time.Now().Add(refusalKept)
			nd.use.refusedGot, nd.use.refusedWant = got, want
			return nil, poolTooSmall(what, nd, got, want, "")
		}
	}
	for _, nd := range needs {
		nd.use.reserved += nd.n
		nd.use.consumers++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			blockingMu.Lock()
			defer blockingMu.Unlock()
			for _, nd := range needs {
				nd.use.reserved -= nd.n
				nd.use.consumers--
				nd.use.refusedAt, nd.use.refusedNeed = 0, 0
			}
		})
	}, nil
}

// poolTooSmall is the refusal of reserveBlocking: how large the pool must
// be, and what else to do, in numbers. A pool of Size connections fits the
// consumers when Size ≥ the blocking connections of every consumer on the
// node + 1 (the check borrows, of those, the ones not waiting right now, the
// new consumer's and the 1: want); got is how many it could borrow at once.
func poolTooSmall(what string, nd *blockingNeed, got, want int, when string) error {
	where, pool, size := "", "the pool", "radix.PoolConfig{Size: %d}"
	if nd.node != "" {
		where, pool, size = " on "+nd.node, "that node's pool", "radix.PoolConfig{Size: %d} in the ClusterConfig"
	}
	others := "no other consumer of this client holds any"
	switch {
	case nd.use.consumers == 1:
		others = fmt.Sprintf("the other consumer of this client holds %d", nd.use.reserved)
	case nd.use.consumers > 1:
		others = fmt.Sprintf("the %d other consumers of this client hold %d", nd.use.consumers, nd.use.reserved)
	}
	if nd.node != "" {
		others += " there"
	}
	least := nd.use.reserved + nd.n + 1
	return fmt.Errorf("%w: %s needs %d blocking %s%s, %s, and other calls need 1: %s needs %d connections or more, "+
		"and only %d of the %d needed now were free at once (within %v%s). Give it %d or more ("+size+"), "+
		"or start fewer consumers: one consumer runs many handlers (ConsumerConfig.Concurrency), a MultiConsumer "+
		"serves many queues. Size a pool for 2 per consumer of a one-shard queue (1 with NoPromoter), 1 per shard "+
		"on the node for a consumer of a sharded queue, 1 per MultiConsumer, plus 1",
		ErrPoolTooSmall, what, nd.n, plural(nd.n, "connection"), where, others, pool, least,
		got, want, poolCheckWait, when, least, least)
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// borrow takes want connections of key's pool at the same time, holds them
// until all are there or poolCheckWait has passed, and returns how many it got.
func borrow(ctx context.Context, c Client, key string, want int) int {
	return store.Borrow(ctx, c, key, want, poolCheckWait)
}

// holding counts a connection held for a long time (a MultiConsumer's
// listener) as waiting on node's pool of c, until the returned func is
// called: it is reserved, and no check can borrow it.
func holding(c Client, node string) (done func()) {
	if !accountable(c) {
		return func() {}
	}
	blockingMu.Lock()
	u := usesOf(c, node)
	blockingMu.Unlock()
	u.inUse.Add(1)
	return func() { u.inUse.Add(-1) }
}
