package store

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// validateID accepts 1..128 bytes of printable ASCII without spaces, so an id is
// safe in logs, in a lease token and on the command line of redis-cli.
// maxIDLen is the longest id (the envelope keeps its length in one byte).
const maxIDLen = 128

func validateID(id string) error {
	if len(id) == 0 || len(id) > maxIDLen {
		return fmt.Errorf("%w: length %d (want 1..%d)", ErrInvalidID, len(id), maxIDLen)
	}
	if i := unprintable(id); i >= 0 {
		return fmt.Errorf("%w: byte %#x at %d", ErrInvalidID, id[i], i)
	}
	return nil
}

// unprintable is the index of the first byte of s that is not printable
// ASCII without space (0x21..0x7e), the bytes of ids and group keys; -1 for
// none.
func unprintable(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return i
		}
	}
	return -1
}

// validateCallerID is validateID for an id given with the ID option: it also
// refuses the form of generated ids, so that a caller's id can never be the
// id of a live message that prioq named (see newID).
func validateCallerID(id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	if isGeneratedID(id) {
		return fmt.Errorf("%w: %q has the form of a generated id (%q and %d characters of 0-9a-v), which only prioq gives",
			ErrInvalidID, id, generatedIDMark, generatedIDLen-1)
	}
	return nil
}

// Generated ids are generatedIDMark followed by 12 bytes: 6 bytes of unix
// milliseconds, 2 bytes of a process-wide counter and 4 random bytes, written
// in base32 with the sorted "hex" alphabet in lower case, so they are 21
// characters long and sort by creation time, to the millisecond (the counter
// wraps every 65,536 ids, so within a millisecond their order is not creation
// order; nothing orders messages by id).
//
// The mark gives generated ids a form of their own, which the ID option
// refuses: the ids set holds caller ids only (a set entry per message would
// cost more than the message itself), so a caller id equal to a generated
// one would not be seen as a duplicate, and the delayed store, keyed by id,
// would be overwritten. Versions before the mark generated the 20 characters
// alone; callers may still give such ids (rs/xid makes them too), and the
// scripts keep those from overwriting a delayed record (see enqueue.lua).
const (
	generatedIDMark = '@'
	generatedIDLen  = 21
)

var (
	idEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)
	idCounter  atomic.Uint32
)

func newID(now time.Time) string {
	var b [12]byte
	ms := uint64(now.UnixMilli())
	b[0], b[1], b[2] = byte(ms>>40), byte(ms>>32), byte(ms>>24)
	b[3], b[4], b[5] = byte(ms>>16), byte(ms>>8), byte(ms)
	binary.BigEndian.PutUint16(b[6:], uint16(idCounter.Add(1)))
	_, _ = rand.Read(b[8:]) // crypto/rand.Read never fails on supported platforms
	return string(generatedIDMark) + lowerASCII(idEncoding.EncodeToString(b[:]))
}

// isGeneratedID reports whether id has the form newID gives, with or without
// the shard a queue of several shards puts after it (see shardID).
func isGeneratedID(id string) bool {
	if len(id) < generatedIDLen || id[0] != generatedIDMark {
		return false
	}
	for i := 1; i < generatedIDLen; i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'v') {
			return false
		}
	}
	if len(id) == generatedIDLen {
		return true
	}
	_, ok := generatedShard(id)
	return ok
}

// shardID is a generated id of a queue of several shards: newID's form, a '.'
// and the shard's number (no leading zero), so that the id alone says where
// the message lives.
func shardID(id string, shard int) string { return id + "." + strconv.Itoa(shard) }

// generatedShard reads the shard of an id shardID made.
func generatedShard(id string) (int, bool) {
	rest, ok := strings.CutPrefix(id[generatedIDLen:], ".")
	if !ok || rest == "" || len(rest) > 4 || rest[0] == '0' && rest != "0" {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0 && n < MaxShards && strconv.Itoa(n) == rest
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// ValidateID accepts a message id: 1..128 bytes of printable ASCII without
// spaces (ErrInvalidID).
func ValidateID(id string) error { return validateID(id) }

// ValidateCallerID is ValidateID for an id given by a caller: it also
// refuses the form of generated ids.
func ValidateCallerID(id string) error { return validateCallerID(id) }

// IsGeneratedID reports whether id has the form of a generated id.
func IsGeneratedID(id string) bool { return isGeneratedID(id) }

// GeneratedID is a new generated id, stamped with now, for a message of
// shard `shard` of a queue of `shards` shards: with more than one, the id
// says its shard (shardID).
func GeneratedID(now time.Time, shard, shards int) string {
	id := newID(now)
	if shards > 1 {
		id = shardID(id, shard)
	}
	return id
}

// ShardOfID is the shard a generated id says it lives in, of a queue of
// `shards` (0 when it says none, or one beyond them); generated is false
// for an id of the caller's, whose shard the caller's routing decides.
func ShardOfID(id string, shards int) (shard int, generated bool) {
	if !isGeneratedID(id) {
		return 0, false
	}
	if len(id) == generatedIDLen {
		return 0, true
	}
	if n, ok := generatedShard(id); ok && n < shards {
		return n, true
	}
	return 0, true
}

// maxGroupLen is the longest group key (the envelope keeps its length in
// one byte).
const maxGroupLen = 128

// ValidateGroup checks a group key: 1..128 printable ASCII bytes, no space
// (the rules of ids: it is part of key names and of the envelope).
func ValidateGroup(g string) error { return validateGroup(g) }

func validateGroup(g string) error {
	if len(g) == 0 || len(g) > maxGroupLen {
		return fmt.Errorf("%w: group of %d bytes (want 1..%d)", ErrInvalidOption, len(g), maxGroupLen)
	}
	if i := unprintable(g); i >= 0 {
		return fmt.Errorf("%w: group has byte %#x at %d (want printable ASCII, no space)", ErrInvalidOption, g[i], i)
	}
	return nil
}
