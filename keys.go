package prioq

import "strconv"

// keys.go is the only place key names are built. Every key of queue Q has the
// hash tag {Q}, so a queue lives in one Redis Cluster slot and every multi-key
// command and script prioq sends is legal on a cluster. Scripts never build key
// names; they get every key they touch in KEYS. The layout is listed in doc.go.

type keySet struct {
	meta     string // HASH  layout and mode, written once by Open
	ids      string // SET   caller-given ids of live messages (idempotency)
	seq      string // STRING counter: FIFO order inside a range segment
	delayed  string // ZSET  id -> due time (ms)
	dstore   string // HASH  id -> routed envelope of a delayed message
	sched    string // LIST  at most one marker: "the earliest due time moved earlier"
	wake     string // ZSET  at most one member: "ready work may exist" (AtLeastOnce)
	paused   string // STRING present while the queue is paused
	leases   string // ZSET  lease token -> deadline (ms) (AtLeastOnce)
	inflight string // HASH  lease token -> routed lane member (AtLeastOnce)
	dead     string // LIST  dead-letter records (AtLeastOnce)
	lanes    []string
}

func newKeySet(name string, lanes int) keySet {
	p := "prioq:{" + name + "}:"
	k := keySet{
		meta:     p + "meta",
		ids:      p + "ids",
		seq:      p + "seq",
		delayed:  p + "delayed",
		dstore:   p + "dstore",
		sched:    p + "sched",
		wake:     p + "wake",
		paused:   p + "paused",
		leases:   p + "leases",
		inflight: p + "inflight",
		dead:     p + "dead",
		lanes:    make([]string, lanes),
	}
	for i := range k.lanes {
		k.lanes[i] = p + "lane:" + strconv.Itoa(i)
	}
	return k
}

// lanesHighFirst returns the lane keys in serving order: highest lane first.
func (k keySet) lanesHighFirst() []string {
	out := make([]string, len(k.lanes))
	for i := range k.lanes {
		out[i] = k.lanes[len(k.lanes)-1-i]
	}
	return out
}

// all lists every key of the queue, for Purge-style operations and tests.
func (k keySet) all() []string {
	return append([]string{k.meta, k.ids, k.seq, k.delayed, k.dstore, k.sched,
		k.wake, k.paused, k.leases, k.inflight, k.dead}, k.lanes...)
}
