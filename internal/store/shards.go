package store

import (
	"sync/atomic"

	"github.com/mediocregopher/radix/v4"
)

// FilledLanes is how many lanes a queue has at most without the filled
// index (see filledLanes).
const FilledLanes = filledLanes

// NewShards makes the shards of queue name, cfg.Shards of them, making no
// call: a queue of one shard has its name as its hash tag (keys.go), shard
// i of a queue of several the i-th of shardTags. cfg is shared by them all.
func NewShards(c Client, name string, cfg *Config) []*Shard {
	lanes := cfg.Layout.lanes()
	if cfg.Shards <= 1 {
		return []*Shard{newShard(c, name, cfg, newKeySet(name, lanes))}
	}
	out := make([]*Shard, 0, cfg.Shards)
	for i, tag := range shardTags(name, cfg.Shards) {
		out = append(out, newShard(c, name, cfg, shardKeySet(name, i, tag, lanes)))
	}
	return out
}

// Name is the name of the shard's queue.
func (s *Shard) Name() string { return s.name }

// Config is the queue's config, shared by its shards; read-only.
func (s *Shard) Config() *Config { return s.cfg }

// Client is the client the shard's calls go to.
func (s *Shard) Client() Client { return s.c }

// Keys is the shard's key set; read-only.
func (s *Shard) Keys() *KeySet { return &s.k }

// Slot is the Redis Cluster hash slot of the shard's keys.
func (s *Shard) Slot() int { return int(radix.ClusterSlot([]byte(s.k.slotKey()))) }

// IsRange reports whether the queue's layout is a Range.
func (s *Shard) IsRange() bool { return s.isRange() }

// Lists reports whether the queue is a Range queue of format 4 (a list per
// priority): its AtMostOnce consumers take with take.lua, not a blocking pop.
func (s *Shard) Lists() bool { return s.lists() }

// Filled reports whether the queue's lanes are named in its filled index.
func (s *Shard) Filled() bool { return s.filled() }

// Wakes reports whether writes that make work ready arm the wake-up set:
// consumers wait on it rather than popping the lanes.
func (s *Shard) Wakes() bool { return s.wakes() }

// Sharded reports whether the shard is one of a queue of several.
func (s *Shard) Sharded() bool { return s.sharded() }

// CountBlocking makes the shard's blocking calls count themselves in n
// while they wait (the root's accounting of pool connections), unless a
// counter is set already.
func (s *Shard) CountBlocking(n *atomic.Int64) { s.blockUse.CompareAndSwap(nil, n) }

// DecodeLaneEntry decodes what a lane holds (see decodeLaneEntry).
func (s *Shard) DecodeLaneEntry(b []byte) (Envelope, error) { return s.decodeLaneEntry(b) }
