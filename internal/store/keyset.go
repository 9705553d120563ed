package store

// The key layout's names for the layers above (keys.go describes each key):
// read-only views of a shard's KeySet, and the parts of a queue's key names
// that the root's public MetaKeyPattern is made of.

// KeyPrefix, KeyTagEnd and MetaName make a queue's meta key:
// KeyPrefix + name + KeyTagEnd + MetaName.
const (
	KeyPrefix = keyPrefix
	KeyTagEnd = keyTagEnd
	MetaName  = metaName
)

// ValidateName refuses a queue name that cannot make key names
// (ErrInvalidName).
func ValidateName(name string) error { return validateName(name) }

// Meta is the queue's meta key (the queue's, for every shard).
func (k *KeySet) Meta() string { return k.meta }

// IDs is the set of live caller-given ids.
func (k *KeySet) IDs() string { return k.ids }

// Seq is the sequence counter.
func (k *KeySet) Seq() string { return k.seq }

// Delayed is the sorted set of delayed messages; DStore their records.
func (k *KeySet) Delayed() string { return k.delayed }

// DStore is the hash of delayed records.
func (k *KeySet) DStore() string { return k.dstore }

// Sched is the promoters' wake-up (a list, or a sorted set for a shard of
// several).
func (k *KeySet) Sched() string { return k.sched }

// Counts is the hash of totals.
func (k *KeySet) Counts() string { return k.counts }

// Filled is the filled index.
func (k *KeySet) Filled() string { return k.filled }

// GReady, GPark, GLimits, GDue and GFlight are the groups' keys.
func (k *KeySet) GReady() string  { return k.gready }
func (k *KeySet) GPark() string   { return k.gpark }
func (k *KeySet) GLimits() string { return k.glimits }
func (k *KeySet) GDue() string    { return k.gdue }
func (k *KeySet) GFlight() string { return k.gflight }

// Rate and RLog are the queue's rate limit and its log.
func (k *KeySet) Rate() string { return k.rate }
func (k *KeySet) RLog() string { return k.rlog }

// Wake is the wake-up set, and the shard's channel.
func (k *KeySet) Wake() string { return k.wake }

// Paused, Leases, Inflight and Dead are the keys of their names.
func (k *KeySet) Paused() string   { return k.paused }
func (k *KeySet) Leases() string   { return k.leases }
func (k *KeySet) Inflight() string { return k.inflight }
func (k *KeySet) Dead() string     { return k.dead }

// Fence is the key that never exists.
func (k *KeySet) Fence() string { return k.fence }

// Prefix is what every key but the meta key starts with.
func (k *KeySet) Prefix() string { return k.prefix }

// Lanes are the lane keys, lane 0 (lowest priority) first; HighFirst the
// same in serving order. Shared: callers must not write into them.
func (k *KeySet) Lanes() []string     { return k.lanes }
func (k *KeySet) HighFirst() []string { return k.highFirst }

// LaneOf is the lane of lane key key.
func (k *KeySet) LaneOf(key string) (int, bool) {
	i, ok := k.laneIndex[key]
	return i, ok
}

// GroupLeases is the key of group g's lease tokens in flight.
func (k *KeySet) GroupLeases(g string) string { return k.groupLeases(g) }

// Poke is consumer id's poke key of the shard.
func (k *KeySet) Poke(id string) string { return k.poke(id) }

// PrioList is the list of priority p (Range, format 4).
func (k *KeySet) PrioList(p int64) string { return k.prioList(p) }

// SlotKey is a key of the shard's own hash slot.
func (k *KeySet) SlotKey() string { return k.slotKey() }

// Schedules is the hash of the queue's schedules (shard 0's).
func (k *KeySet) Schedules() string { return k.schedules }

// SDue is the sorted set of the schedules' next fire times.
func (k *KeySet) SDue() string { return k.sdue }

// All lists every key of the queue's shard.
func (k *KeySet) All() []string { return k.all() }
