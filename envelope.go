package prioq

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
)

// The stored form of a message is a compact, versioned binary envelope:
//
//	offset size field
//	0      1    version (1)
//	1      1    flags: bit 0 = the id was given by the producer (it is in the ids set)
//	2      8    priority, int64 big-endian
//	10     8    enqueue time, unix ms, int64 big-endian
//	18     4    finished deliveries, uint32 big-endian (counted by Lua when a
//	            delivery ends: a retry, an expired lease, a dead letter; a take
//	            leaves the bytes as they are)
//	22     1    id length n (1..128)
//	23     n    id
//	23+n   ...  payload (at least one byte)
//
// The Lua scripts read the flags, the attempts and the id: scripts.go gives
// them these offsets as constants (protocol.go), so a change here reaches
// them. Bump the version when changing the layout.
const (
	envVersion     = 1
	envOffFlags    = 1
	envOffPriority = 2
	envOffEnqueued = 10
	envOffAttempt  = 18
	envOffIDLen    = 22
	envHeaderLen   = 23 // the id starts here
	flagCallerID   = 1 << 0
	maxIDLen       = 128
)

type envelope struct {
	ID         string
	CallerID   bool
	Priority   int64
	EnqueuedMs int64
	Attempts   uint32
	Payload    []byte
}

func (e *envelope) encode() []byte {
	b := make([]byte, envHeaderLen+len(e.ID)+len(e.Payload))
	b[0] = envVersion
	if e.CallerID {
		b[envOffFlags] = flagCallerID
	}
	binary.BigEndian.PutUint64(b[envOffPriority:], uint64(e.Priority))
	binary.BigEndian.PutUint64(b[envOffEnqueued:], uint64(e.EnqueuedMs))
	binary.BigEndian.PutUint32(b[envOffAttempt:], e.Attempts)
	b[envOffIDLen] = byte(len(e.ID))
	copy(b[envHeaderLen:], e.ID)
	copy(b[envHeaderLen+len(e.ID):], e.Payload)
	return b
}

// decodeEnvelope parses b. It never panics; anything it cannot read is ErrCorrupt.
// The payload aliases b.
func decodeEnvelope(b []byte) (envelope, error) {
	var e envelope
	if len(b) < envHeaderLen {
		return e, fmt.Errorf("%w: %d bytes is shorter than the header", ErrCorrupt, len(b))
	}
	if b[0] != envVersion {
		return e, fmt.Errorf("%w: unknown envelope version %d", ErrCorrupt, b[0])
	}
	if b[envOffFlags]&^flagCallerID != 0 {
		return e, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, b[envOffFlags])
	}
	n := int(b[envOffIDLen])
	if n == 0 || n > maxIDLen || len(b) < envHeaderLen+n+1 {
		return e, fmt.Errorf("%w: bad id length %d for %d bytes", ErrCorrupt, n, len(b))
	}
	e.CallerID = b[envOffFlags]&flagCallerID != 0
	e.Priority = int64(binary.BigEndian.Uint64(b[envOffPriority:]))
	e.EnqueuedMs = int64(binary.BigEndian.Uint64(b[envOffEnqueued:]))
	e.Attempts = binary.BigEndian.Uint32(b[envOffAttempt:])
	e.ID = string(b[envHeaderLen : envHeaderLen+n])
	if err := validateID(e.ID); err != nil {
		return e, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	e.Payload = b[envHeaderLen+n:]
	return e, nil
}

// envelopeID reads only the id, for error reports about envelopes that do not
// fully decode. It returns "" when even that is unreadable.
func envelopeID(b []byte) string {
	if len(b) < envHeaderLen {
		return ""
	}
	n := int(b[envOffIDLen])
	if n == 0 || len(b) < envHeaderLen+n || validateID(string(b[envHeaderLen:envHeaderLen+n])) != nil {
		return ""
	}
	return string(b[envHeaderLen : envHeaderLen+n])
}

// validateID accepts 1..128 bytes of printable ASCII without spaces, so an id is
// safe in logs, in a lease token and on the command line of redis-cli.
func validateID(id string) error {
	if len(id) == 0 || len(id) > maxIDLen {
		return fmt.Errorf("%w: length %d (want 1..%d)", ErrInvalidID, len(id), maxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return fmt.Errorf("%w: byte %#x at %d", ErrInvalidID, id[i], i)
		}
	}
	return nil
}

// ids are 12 bytes: 6 bytes of unix milliseconds, 2 bytes of a process-wide
// counter and 4 random bytes, written in base32 with the sorted "hex" alphabet,
// so they are 20 characters long and sort by creation time, to the
// millisecond (the counter wraps every 65,536 ids, so within a millisecond
// their order is not creation order; nothing orders messages by id).
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
	s := idEncoding.EncodeToString(b[:])
	return lowerASCII(s)
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
