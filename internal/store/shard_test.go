package store

import (
	"testing"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// A level list and a priority's list hold envelopes; a segment of format 2
// holds an 8-byte sequence, then the envelope.
func TestDecodeLaneEntry(t *testing.T) {
	env := (&Envelope{ID: "abc", Priority: 2, Payload: []byte("p")}).Encode()
	seq := []byte{0, 0, 0, 0, 0, 0, 0, 7}
	levels, rng := pureShard(Levels(3)), pureShard(RangeSorted(0, 9, 2))
	e, err := pureShard(Range(0, 9, 2)).decodeLaneEntry(env)
	require.NoError(t, err)
	assert.Equal(t, "abc", e.ID, "a Range queue of format 4")

	e, err = levels.decodeLaneEntry(env)
	require.NoError(t, err)
	assert.Equal(t, "abc", e.ID)
	e, err = rng.decodeLaneEntry(append(seq, env...))
	require.NoError(t, err)
	assert.Equal(t, "abc", e.ID)
	assert.Equal(t, []byte("p"), e.Payload)

	_, err = levels.decodeLaneEntry(append(seq, env...))
	assert.ErrorIs(t, err, ErrCorrupt, "a segment member in a level list")
	_, err = rng.decodeLaneEntry(env)
	assert.ErrorIs(t, err, ErrCorrupt, "an envelope without its sequence in a segment")
	_, err = rng.decodeLaneEntry(seq[:7])
	assert.ErrorIs(t, err, ErrCorrupt)
	_, err = rng.decodeLaneEntry(nil)
	assert.ErrorIs(t, err, ErrCorrupt)
}
