package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
)

// The stored form of a message is a compact, versioned binary envelope:
//
//	offset size field
//	0      1    version: 1, or 2 when the message has headers, or 3 when it has
//	            a group (Group)
//	1      1    flags: bit 0 = the id was given by the producer (it is in the ids set);
//	            bit 1 (version 3 only) = the message has headers
//	2      8    priority, int64 big-endian
//	10     8    enqueue time, unix ms, int64 big-endian
//	18     4    finished deliveries, uint32 big-endian (counted by Lua when a
//	            delivery ends: a retry, an expired lease, a dead letter; a take
//	            leaves the bytes as they are)
//	22     1    id length n (1..128)
//	23     n    id
//	23+n   ...  version 3 only: the group's length g (1..128, one byte), the
//	            group; versions 2 and 3 with flag bit 1: the headers; then
//	            payload (at least one byte)
//
// Headers (version 2) are a uvarint count (1..MaxHeaders), then per header,
// sorted by key, a uvarint key length, the key, a uvarint value length and the
// value. A message without headers is written as version 1, byte for byte as
// before headers existed, so they cost nothing when unused, and messages
// stored by earlier versions decode unchanged. A message without a group is
// version 1 or 2 as before; versions before groups refuse version 3
// (ErrCorrupt), which only a queue with groups holds.
//
// The Lua scripts read the flags, the attempts, the id and the group: lua.go gives
// them these offsets as constants (protocol.go), so a change here reaches
// them. Bump the version when changing the layout.
const (
	envVersion     = 1
	envVersionHdr  = 2
	envVersionGrp  = 3
	envOffFlags    = 1
	envOffPriority = 2
	envOffEnqueued = 10
	envOffAttempt  = 18
	envOffIDLen    = 22
	envHeaderLen   = 23 // the id starts here
	flagCallerID   = 1 << 0
	flagHeaders    = 1 << 1 // version 3 only
)

type Envelope struct {
	ID         string
	Group      string // "" for none
	CallerID   bool
	Priority   int64
	EnqueuedMs int64
	Attempts   uint32
	Headers    map[string]string
	Payload    []byte
}

// Limits of headers: Enqueue refuses more with ErrInvalidHeader.
const (
	// MaxHeaders is the most headers one message carries.
	MaxHeaders = 64

	// MaxHeaderKey is the longest header key, in bytes (at least 1).
	MaxHeaderKey = 256

	// MaxHeaderBytes bounds all keys and values of one message together.
	MaxHeaderBytes = 16 << 10
)

// ValidateHeaders checks h against the limits above.
func ValidateHeaders(h map[string]string) error {
	if len(h) > MaxHeaders {
		return fmt.Errorf("%w: %d headers (limit %d)", ErrInvalidHeader, len(h), MaxHeaders)
	}
	total := 0
	for k, v := range h {
		if len(k) == 0 || len(k) > MaxHeaderKey {
			return fmt.Errorf("%w: key of %d bytes (want 1..%d)", ErrInvalidHeader, len(k), MaxHeaderKey)
		}
		total += len(k) + len(v)
	}
	if total > MaxHeaderBytes {
		return fmt.Errorf("%w: %d bytes of keys and values (limit %d)", ErrInvalidHeader, total, MaxHeaderBytes)
	}
	return nil
}

// appendHeaders writes h in its canonical form: sorted keys, minimal uvarints.
func appendHeaders(b []byte, h map[string]string) []byte {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(h[k])))
		b = append(b, h[k]...)
	}
	return b
}

// readHeaders parses the headers at the start of b and returns them and the
// bytes after them. Anything but the canonical form of valid headers is
// ErrCorrupt, so that every envelope has exactly one encoding.
func readHeaders(b []byte) (map[string]string, []byte, error) {
	rest := b
	next := func() (string, bool) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return "", false
		}
		s := string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
		return s, true
	}
	count, k := binary.Uvarint(rest)
	if k <= 0 || count == 0 || count > MaxHeaders {
		return nil, nil, fmt.Errorf("%w: header count", ErrCorrupt)
	}
	rest = rest[k:]
	h := make(map[string]string, count)
	for i := uint64(0); i < count; i++ {
		key, ok1 := next()
		val, ok2 := next()
		if !ok1 || !ok2 {
			return nil, nil, fmt.Errorf("%w: header %d", ErrCorrupt, i)
		}
		h[key] = val
	}
	if ValidateHeaders(h) != nil || !bytes.Equal(appendHeaders(nil, h), b[:len(b)-len(rest)]) {
		return nil, nil, fmt.Errorf("%w: headers not in canonical form", ErrCorrupt)
	}
	return h, rest, nil
}

func (e *Envelope) Encode() []byte {
	b := make([]byte, envHeaderLen, envHeaderLen+len(e.ID)+1+len(e.Group)+len(e.Payload)+e.headersSize())
	b[0] = envVersion
	if len(e.Headers) > 0 {
		b[0] = envVersionHdr
	}
	if e.CallerID {
		b[envOffFlags] = flagCallerID
	}
	if e.Group != "" {
		b[0] = envVersionGrp
		if len(e.Headers) > 0 {
			b[envOffFlags] |= flagHeaders
		}
	}
	binary.BigEndian.PutUint64(b[envOffPriority:], uint64(e.Priority))
	binary.BigEndian.PutUint64(b[envOffEnqueued:], uint64(e.EnqueuedMs))
	binary.BigEndian.PutUint32(b[envOffAttempt:], e.Attempts)
	b[envOffIDLen] = byte(len(e.ID))
	b = append(b, e.ID...)
	if e.Group != "" {
		b = append(b, byte(len(e.Group)))
		b = append(b, e.Group...)
	}
	if len(e.Headers) > 0 {
		b = appendHeaders(b, e.Headers)
	}
	return append(b, e.Payload...)
}

// headersSize is an upper bound of the encoded headers' size.
func (e *Envelope) headersSize() int {
	if len(e.Headers) == 0 {
		return 0
	}
	n := binary.MaxVarintLen64
	for k, v := range e.Headers {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	return n
}

// DecodeEnvelope parses b. It never panics; anything it cannot read is ErrCorrupt.
// The payload aliases b.
func DecodeEnvelope(b []byte) (Envelope, error) {
	var e Envelope
	if len(b) < envHeaderLen {
		return e, fmt.Errorf("%w: %d bytes is shorter than the header", ErrCorrupt, len(b))
	}
	if b[0] != envVersion && b[0] != envVersionHdr && b[0] != envVersionGrp {
		return e, fmt.Errorf("%w: unknown envelope version %d", ErrCorrupt, b[0])
	}
	known := byte(flagCallerID)
	if b[0] == envVersionGrp {
		known |= flagHeaders
	}
	if b[envOffFlags]&^known != 0 {
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
	rest := b[envHeaderLen+n:]
	if b[0] == envVersionGrp {
		g := int(rest[0])
		if g == 0 || len(rest) < 1+g {
			return e, fmt.Errorf("%w: bad group length %d for %d bytes", ErrCorrupt, g, len(rest))
		}
		e.Group, rest = string(rest[1:1+g]), rest[1+g:]
		if err := validateGroup(e.Group); err != nil {
			return e, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	}
	if b[0] == envVersionHdr || (b[0] == envVersionGrp && b[envOffFlags]&flagHeaders != 0) {
		h, after, err := readHeaders(rest)
		if err != nil {
			return e, err
		}
		e.Headers, rest = h, after
	}
	if len(rest) == 0 {
		return e, fmt.Errorf("%w: no payload", ErrCorrupt)
	}
	e.Payload = rest
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
