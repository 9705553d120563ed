package store

import (
	"strconv"
	"strings"
	"testing"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Every key carries the queue's hash tag (one cluster slot per queue), and
// each script's KEYS come in the order its header in lua/*.lua documents.
func TestNewKeySet(t *testing.T) {
	k := newKeySet("orders", 3)
	p := "prioq:{orders}:"
	for name, got := range map[string]string{"meta": k.meta, "ids": k.ids, "seq": k.seq, "delayed": k.delayed,
		"dstore": k.dstore, "sched": k.sched, "wake": k.wake, "paused": k.paused, "leases": k.leases,
		"inflight": k.inflight, "dead": k.dead, "counts": k.counts, "filled": k.filled,
		"gready": k.gready, "gpark": k.gpark, "glimits": k.glimits, "gdue": k.gdue, "gflight": k.gflight,
		"rate": k.rate, "rlog": k.rlog, "hist": k.hist,
		"schedules": k.schedules, "sdue": k.sdue, "done": k.done, "res": k.res, "cancelled": k.cancelled} {
		assert.Equal(t, p+name, got)
	}
	lanes := []string{p + "lane:0", p + "lane:1", p + "lane:2"}
	assert.Equal(t, lanes, k.lanes)
	assert.Equal(t, []string{p + "lane:2", p + "lane:1", p + "lane:0"}, k.highFirst)
	assert.Equal(t, map[string]int{lanes[0]: 0, lanes[1]: 1, lanes[2]: 2}, k.laneIndex)

	all := k.all()
	require.Len(t, all, 26+3)
	seen := map[string]bool{}
	for _, key := range all {
		assert.True(t, strings.HasPrefix(key, p), key)
		assert.Equal(t, 1, strings.Count(key, "{"), key)
		assert.False(t, seen[key], "%s twice", key)
		seen[key] = true
	}

	with := func(fixed ...string) []string { return append(fixed, lanes...) }
	assert.Equal(t, with(k.delayed, k.dstore, k.seq, k.wake, k.dead), k.promoteKeys)
	assert.Equal(t, with(k.ids, k.delayed, k.dstore, k.sched), k.purgeKeys)
	assert.Equal(t, append([]string{k.ids, k.delayed, k.dstore}, k.highFirst...), k.cancelKeys)
	assert.Equal(t, with(k.leases, k.inflight, k.delayed, k.dstore, k.dead, k.wake, k.sched, k.seq), k.failKeys)
	assert.Equal(t, with(k.leases, k.inflight, k.dead, k.wake, k.paused), k.sweepKeys)
	assert.Equal(t, with(k.dead, k.ids, k.seq, k.wake), k.deadKeys)
}

// The shared key lists have no spare capacity, so a caller's append copies
// instead of writing into another caller's list.
func TestKeySetListsAreClipped(t *testing.T) {
	k := newKeySet("q", 5)
	for name, s := range map[string][]string{
		"highFirst": k.highFirst, "promoteKeys": k.promoteKeys, "purgeKeys": k.purgeKeys,
		"cancelKeys": k.cancelKeys, "failKeys": k.failKeys, "sweepKeys": k.sweepKeys, "deadKeys": k.deadKeys,
	} {
		assert.Equal(t, len(s), cap(s), name)
	}
	before := append([]string(nil), k.highFirst...)
	a := append(k.highFirst, "x")
	b := append(k.highFirst, "y")
	assert.Equal(t, "x", a[len(a)-1])
	assert.Equal(t, before, k.highFirst)
	assert.Equal(t, "y", b[len(b)-1])
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"orders:eu-1", true},
		{"!~", true},
		{strings.Repeat("x", 100), true},
		{"", false},
		{strings.Repeat("x", 101), false},
		{"a{b", false}, // braces would change the cluster hash tag
		{"a}b", false},
		{"a b", false},
		{"a\tb", false},
		{"a\x7fb", false},
		{"é", false},
	} {
		err := validateName(tc.name)
		if tc.ok {
			assert.NoError(t, err, "%q", tc.name)
		} else {
			assert.ErrorIs(t, err, ErrInvalidName, "%q", tc.name)
		}
	}
}

// Shard tags spread the shards evenly over primaries that split the slots
// evenly in order (as redis-cli --cluster create does): ⌊n/P⌋ or ⌈n/P⌉ each.
// They are the same in every process, distinct, and the keys of a shard share
// one slot that no other shard of the queue uses.
func TestShardTagsSpreadOverPrimaries(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 6, 8, 16, 64, 256} {
		tags := shardTags("orders", n)
		assert.Equal(t, tags, shardTags("orders", n), "deterministic")
		slots := map[uint16]bool{}
		for i, tag := range tags {
			k := shardKeySet("orders", i, tag, 3)
			slot := radix.ClusterSlot([]byte(k.lanes[0]))
			for _, key := range append(k.all()[1:], k.lanes...) { // meta aside: the queue's
				require.Equal(t, slot, radix.ClusterSlot([]byte(key)), key)
			}
			assert.False(t, slots[slot], "shard %d of %d shares a slot", i, n)
			slots[slot] = true
			assert.True(t, strings.HasPrefix(k.lanes[0], "prioq/"+strconv.Itoa(i)+":{orders/"), k.lanes[0])
		}
		for _, p := range []int{1, 2, 3, 5, 6, 10} {
			count := make([]int, p)
			for _, tag := range tags {
				slot := int(radix.ClusterSlot([]byte(tag)))
				count[slot*p/shardSlots]++
			}
			for primary, c := range count {
				assert.True(t, c == n/p || c == (n+p-1)/p, "n=%d P=%d: primary %d holds %d shards", n, p, primary, c)
			}
		}
	}
	// The keys of a queue of one shard are as before shards existed.
	assert.Equal(t, "prioq:{orders}:lane:0", newKeySet("orders", 1).lanes[0])
	assert.Equal(t, "prioq:{orders}:meta", shardKeySet("orders", 3, "orders/7", 1).meta, "the queue's meta key")
}
