package store

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// The stored form is read by the Lua scripts at fixed offsets: every byte of
// it is pinned here.
func TestEnvelopeEncodeLayout(t *testing.T) {
	e := Envelope{ID: "ab", CallerID: true, Priority: -2, EnqueuedMs: 0x0102030405060708,
		Attempts: 0x0a0b0c0d, Payload: []byte("xyz")}
	want := []byte{
		1,                                              // version
		1,                                              // flags: caller id
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, // priority -2
		1, 2, 3, 4, 5, 6, 7, 8, // enqueue time
		0x0a, 0x0b, 0x0c, 0x0d, // attempts, at envOffAttempt
		2, 'a', 'b', // id length, id
		'x', 'y', 'z', // payload
	}
	assert.Equal(t, want, e.Encode())
	assert.Equal(t, 18, envOffAttempt)
	assert.Equal(t, 23, envHeaderLen)

	e.CallerID = false
	assert.Equal(t, byte(0), e.Encode()[1], "flags without a caller id")
}

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, e := range []Envelope{
		{ID: "a", Payload: []byte{0}},
		{ID: "order-1", CallerID: true, Priority: 7, EnqueuedMs: 1700000000123, Attempts: 3, Payload: []byte("hello")},
		{ID: "min", Priority: -1 << 63, EnqueuedMs: -1 << 63, Payload: []byte("p")},
		{ID: "max", Priority: 1<<63 - 1, EnqueuedMs: 1<<63 - 1, Attempts: 1<<32 - 1, Payload: []byte("p")},
		{ID: strings.Repeat("i", maxIDLen), Payload: bytes.Repeat([]byte{0xff, 0}, 1000)},
		{ID: "!~", Payload: []byte("\x00\r\n|")},
	} {
		b := e.Encode()
		require.Len(t, b, envHeaderLen+len(e.ID)+len(e.Payload))
		got, err := DecodeEnvelope(b)
		require.NoError(t, err, "%q", e.ID)
		assert.Equal(t, e, got)
		assert.Equal(t, e.ID, envelopeID(b))
	}
}

// Every way a stored Envelope can be broken is ErrCorrupt, never a panic.
func TestEnvelopeDecodeCorrupt(t *testing.T) {
	good := (&Envelope{ID: "abc", Priority: 1, Payload: []byte("p")}).Encode()
	with := func(i int, v byte) []byte {
		b := bytes.Clone(good)
		b[i] = v
		return b
	}
	longID := (&Envelope{ID: strings.Repeat("i", maxIDLen+1), Payload: []byte("p")}).Encode()
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"one byte short of the header", good[:envHeaderLen-1]},
		{"header only", good[:envHeaderLen]},
		{"no payload", good[:envHeaderLen+3]},
		{"version 0", with(0, 0)},
		{"version 2", with(0, 2)},
		{"unknown flag", with(1, 2)},
		{"high flag", with(1, 0x81)},
		{"id length 0", with(22, 0)},
		{"id length past the end", with(22, 4)},
		{"id length 255", with(22, 255)},
		{"id of 129 bytes", longID},
		{"space in id", with(envHeaderLen+1, ' ')},
		{"DEL in id", with(envHeaderLen+1, 0x7f)},
		{"NUL in id", with(envHeaderLen+1, 0)},
		{"non-ASCII in id", with(envHeaderLen+1, 0xc3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotPanics(t, func() {
				_, err := DecodeEnvelope(tc.b)
				assert.ErrorIs(t, err, ErrCorrupt)
			})
		})
	}
	// Every prefix short of the last byte is corrupt; the whole decodes.
	for n := 0; n < len(good); n++ {
		_, err := DecodeEnvelope(good[:n])
		assert.ErrorIs(t, err, ErrCorrupt, "prefix of %d bytes", n)
	}
	_, err := DecodeEnvelope(good)
	assert.NoError(t, err)
}

// envelopeID reads the id of an Envelope that may not decode, or "".
func TestEnvelopeID(t *testing.T) {
	good := (&Envelope{ID: "abc", Payload: []byte("p")}).Encode()
	with := func(i int, v byte) []byte {
		b := bytes.Clone(good)
		b[i] = v
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"good", good, "abc"},
		{"bad version", with(0, 9), "abc"},
		{"bad flags", with(1, 0xf0), "abc"},
		{"no payload", good[:envHeaderLen+3], "abc"},
		{"id cut short", good[:envHeaderLen+2], ""},
		{"shorter than the header", good[:envHeaderLen-1], ""},
		{"id length 0", with(22, 0), ""},
		{"space in id", with(envHeaderLen, ' '), ""},
		{"nil", nil, ""},
	} {
		assert.Equal(t, tc.want, envelopeID(tc.b), tc.name)
	}
}

func FuzzEnvelopeDecode(f *testing.F) {
	good := (&Envelope{ID: "abc", CallerID: true, Priority: -7, EnqueuedMs: 1700000000000, Attempts: 3, Payload: []byte("hello")}).Encode()
	f.Add(good)
	f.Add((&Envelope{ID: "abc", Headers: map[string]string{"a": "1", "traceparent": "00-x"}, Payload: []byte("p")}).Encode())
	f.Add(good[:envHeaderLen])
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEnvelope(b)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to the same bytes.
		if again := e.Encode(); !bytes.Equal(again, b) {
			t.Fatalf("round trip changed %x into %x", b, again)
		}
	})
}

func FuzzEnvelopeRoundTrip(f *testing.F) {
	f.Add("id", false, int64(0), int64(0), uint32(0), []byte("p"))
	f.Add("01hx-é", true, int64(-1<<63), int64(1<<62), uint32(1<<31), []byte{0})
	f.Fuzz(func(t *testing.T, id string, caller bool, prio, ms int64, attempts uint32, payload []byte) {
		if validateID(id) != nil || len(payload) == 0 {
			t.Skip()
		}
		in := Envelope{ID: id, CallerID: caller, Priority: prio, EnqueuedMs: ms, Attempts: attempts, Payload: payload}
		if len(payload)%2 == 0 { // half of the cases carry headers made of the inputs
			in.Headers = map[string]string{"id": id, "payload": string(payload)}
		}
		if attempts%3 == 0 { // a third a group (the id as group)
			in.Group = id
		}
		out, err := DecodeEnvelope(in.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if out.ID != in.ID || out.Group != in.Group || out.CallerID != in.CallerID || out.Priority != in.Priority ||
			out.EnqueuedMs != in.EnqueuedMs || out.Attempts != in.Attempts || !bytes.Equal(out.Payload, in.Payload) ||
			len(out.Headers) != len(in.Headers) || out.Headers["id"] != in.Headers["id"] || out.Headers["payload"] != in.Headers["payload"] {
			t.Fatalf("%+v decoded as %+v", in, out)
		}
	})
}

// A message without headers is stored exactly as before headers existed
// (version 1), so old messages decode and new ones cost nothing extra; with
// headers it is version 2 and the headers come back as they went in.
func TestEnvelopeHeaders(t *testing.T) {
	plain := Envelope{ID: "m-1", Priority: 4, EnqueuedMs: 99, Attempts: 2, Payload: []byte("body")}
	v1 := plain.Encode()
	// The version 1 layout written by hand, as prioq before headers wrote it.
	old := append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 99, 0, 0, 0, 2, 3}, "m-1body"...)
	assert.Equal(t, old, v1, "no headers: version 1, byte for byte")
	got, err := DecodeEnvelope(old)
	require.NoError(t, err)
	assert.Zero(t, len(got.Headers))
	assert.True(t, got.Headers == nil, "no map when there are no headers")
	assert.Equal(t, "body", string(got.Payload))

	with := plain
	with.Headers = map[string]string{"traceparent": "00-abc-01", "tenant": "", "z": strings.Repeat("v", 300)}
	b := with.Encode()
	assert.Equal(t, byte(2), b[0])
	assert.Equal(t, v1[1:envHeaderLen+3], b[1:envHeaderLen+3], "the fixed part, read by Lua, is unchanged")
	got, err = DecodeEnvelope(b)
	require.NoError(t, err)
	assert.Equal(t, with.Headers, got.Headers)
	assert.Equal(t, "body", string(got.Payload))
	assert.Equal(t, b, got.Encode(), "one encoding per Envelope")
}

// Only the canonical form of valid headers decodes: anything else is
// ErrCorrupt, never a panic.
func TestEnvelopeHeadersCorrupt(t *testing.T) {
	head := (&Envelope{ID: "m", Payload: []byte("p")}).Encode()[:envHeaderLen+1]
	head[0] = envVersionHdr
	hdr := func(parts ...[]byte) []byte {
		b := append([]byte(nil), head...)
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	kv := func(k, v string) []byte {
		b := binary.AppendUvarint(nil, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		return append(b, v...)
	}
	for name, b := range map[string][]byte{
		"no header at all":      hdr([]byte{0}, []byte("p")),
		"count past the limit":  hdr(binary.AppendUvarint(nil, MaxHeaders+1), kv("a", "b"), []byte("p")),
		"unsorted keys":         hdr([]byte{2}, kv("b", "1"), kv("a", "2"), []byte("p")),
		"a key twice":           hdr([]byte{2}, kv("a", "1"), kv("a", "2"), []byte("p")),
		"empty key":             hdr([]byte{1}, kv("", "1"), []byte("p")),
		"overlong length":       hdr([]byte{1, 0x81, 0x00}, []byte("a"), kv("", "")[0:0], []byte{1, 'v'}, []byte("p")),
		"value past the end":    hdr([]byte{1}, []byte{1, 'a', 9, 'v'}),
		"no payload after them": hdr([]byte{1}, kv("a", "1")),
		"truncated count":       hdr([]byte{0x80}),
		"key longer than limit": hdr([]byte{1}, kv(strings.Repeat("k", MaxHeaderKey+1), ""), []byte("p")),
	} {
		_, err := DecodeEnvelope(b)
		assert.ErrorIs(t, err, ErrCorrupt, name)
	}
}

// A message of a group is version 3: the group after the id, then the
// headers when flag bit 1 says so. Versions 1 and 2 are unchanged; damaged
// group fields are ErrCorrupt.
func TestEnvelopeGroup(t *testing.T) {
	for _, h := range []map[string]string{nil, {"k": "v"}} {
		in := Envelope{ID: "m-1", Group: "tenant-7", Priority: 4, EnqueuedMs: 99, Attempts: 2, Headers: h, Payload: []byte("body")}
		b := in.Encode()
		require.Equal(t, byte(envVersionGrp), b[0])
		require.Equal(t, len(h) > 0, b[envOffFlags]&flagHeaders != 0)
		require.Equal(t, "tenant-7", string(b[envHeaderLen+4:envHeaderLen+4+8]))
		out, err := DecodeEnvelope(b)
		require.NoError(t, err)
		assert.Equal(t, in.Group, out.Group)
		assert.Equal(t, len(h), len(out.Headers))
		assert.Equal(t, "body", string(out.Payload))
	}
	good := (&Envelope{ID: "m", Group: "g", Payload: []byte("p")}).Encode()
	for name, bad := range map[string][]byte{
		"group length 0":      append(append([]byte{}, good[:envHeaderLen+1]...), 0, 'p'),
		"group past the end":  append(append([]byte{}, good[:envHeaderLen+1]...), 9, 'g'),
		"group not printable": append(append([]byte{}, good[:envHeaderLen+1]...), 1, ' ', 'p'),
		"headers flag in v1": func() []byte {
			b := (&Envelope{ID: "m", Payload: []byte("p")}).Encode()
			b[envOffFlags] |= flagHeaders
			return b
		}(),
		"no payload after group": good[:envHeaderLen+3],
	} {
		_, err := DecodeEnvelope(bad)
		assert.ErrorIs(t, err, ErrCorrupt, name)
	}
}
