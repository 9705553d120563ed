package store

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func TestValidateID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"a", true},
		{"order-1", true},
		{"!", true}, // 0x21, the lowest byte allowed
		{"~", true}, // 0x7e, the highest
		{strings.Repeat("x", maxIDLen), true},
		{"", false},
		{strings.Repeat("x", maxIDLen+1), false},
		{"a b", false},
		{"a\tb", false},
		{"a\x7f", false},
		{"\x00", false},
		{"é", false},
	} {
		err := validateID(tc.id)
		if tc.ok {
			assert.NoError(t, err, "%q", tc.id)
		} else {
			assert.ErrorIs(t, err, ErrInvalidID, "%q", tc.id)
		}
	}
	assert.Equal(t, 128, maxIDLen)
}

// Generated ids: '@' and 20 lowercase characters of the sorted base32
// alphabet, holding the creation millisecond and a counter, sorting by
// millisecond; a form the ID option refuses, and only it.
func TestNewID(t *testing.T) {
	at := time.UnixMilli(1700000000123)
	decode := func(id string) []byte {
		t.Helper()
		b, err := idEncoding.DecodeString(strings.ToUpper(id[1:]))
		require.NoError(t, err, id)
		require.Len(t, b, 12)
		return b
	}
	a, b := newID(at), newID(at)
	for _, id := range []string{a, b} {
		require.Len(t, id, 21)
		assert.Equal(t, "@", id[:1])
		require.NoError(t, validateID(id))
		assert.ErrorIs(t, validateCallerID(id), ErrInvalidID, "the ID option refuses the generated form")
		assert.True(t, isGeneratedID(id))
		assert.Equal(t, strings.ToLower(id), id)
		assert.Equal(t, "", strings.Trim(id[1:], "0123456789abcdefghijklmnopqrstuv"), id)
	}
	assert.NotEqual(t, a, b)
	da, db := decode(a), decode(b)
	assert.Equal(t, []byte{0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x7b}, da[:6], "unix ms 1700000000123, big-endian")
	assert.Equal(t, da[:6], db[:6])
	assert.Equal(t, binary.BigEndian.Uint16(da[6:8])+1, binary.BigEndian.Uint16(db[6:8]), "the counter steps by one")
	assert.Less(t, newID(time.UnixMilli(0)), newID(time.UnixMilli(1)))
	assert.Less(t, newID(at), newID(at.Add(time.Millisecond)))
	assert.Less(t, newID(at), newID(time.UnixMilli(1<<47)))
	// Everything else a caller may give: the earlier 20-character form (rs/xid
	// makes it too), near misses of the mark's form.
	for _, id := range []string{a[1:], "@" + a[2:], a + "0", "@" + strings.ToUpper(a[1:]), "@0123456789abcdefghiw", "x" + a[1:], "@"} {
		assert.NoError(t, validateCallerID(id), id)
		assert.False(t, isGeneratedID(id), id)
	}
}

func TestLowerASCII(t *testing.T) {
	assert.Equal(t, "abz-09-az", lowerASCII("ABZ-09-aZ"))
	assert.Equal(t, "", lowerASCII(""))
	assert.Equal(t, "é@[`{", lowerASCII("é@[`{"), "only A-Z change")
}

// A generated id of a queue of several shards carries its shard: the ID
// option refuses that form too, and the shard reads back.
func TestShardID(t *testing.T) {
	id := newID(time.UnixMilli(1700000000123))
	for _, shard := range []int{0, 1, 9, 10, 255, MaxShards - 1} {
		s := shardID(id, shard)
		assert.True(t, isGeneratedID(s), s)
		assert.ErrorIs(t, validateCallerID(s), ErrInvalidID, s)
		got, ok := generatedShard(s)
		assert.True(t, ok, s)
		assert.Equal(t, shard, got)
	}
	for _, bad := range []string{id + ".", id + ".01", id + ".x", id + ".-1", id + "." + strconv.Itoa(MaxShards), id + "x"} {
		assert.False(t, isGeneratedID(bad), bad)
		assert.NoError(t, validateCallerID(bad), bad)
	}
}

// A lease token names the process that took it; tokens of the earlier form
// (a random suffix alone) and damaged ones name none.
func TestLeaseHolder(t *testing.T) {
	tok := "0000000000001" + "0002" + takeSuffix()
	if got := LeaseHolder(tok); got != HolderID() || len(got) != 12 {
		t.Fatalf("LeaseHolder(%q) = %q, want %q", tok, got, HolderID())
	}
	for _, bad := range []string{"", "0000000000001" + "0002" + leaseSuffix(), "0000000000001" + "0002" + "ABCDEF012345-00",
		"0000000000001" + "0002" + "abcdef01234-500", "short"} {
		if got := LeaseHolder(bad); got != "" {
			t.Errorf("LeaseHolder(%q) = %q, want none", bad, got)
		}
	}
}
