package store

import (
	"bytes"
	"testing"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// A dead-letter record is "lane|score|diedMs|reasonLen|reason" and the
// envelope; the reason may hold '|'.
func TestParseDead(t *testing.T) {
	env := (&Envelope{ID: "job-7", CallerID: true, Priority: 2, EnqueuedMs: 1700000000000, Attempts: 3, Payload: []byte("doomed")}).Encode()
	rec := func(header string, raw []byte) []byte { return append([]byte(header), raw...) }

	d, err := parseDead(rec("2|-2|1700000000500|9|boom|bang", env))
	require.NoError(t, err)
	assert.Equal(t, "boom|bang", d.Reason)
	assert.Equal(t, int64(1700000000500), d.DiedAt.UnixMilli())
	assert.Equal(t, "job-7", d.ID)
	assert.Equal(t, int64(2), d.Priority)
	assert.Equal(t, 3, d.Attempts)
	assert.Equal(t, []byte("doomed"), d.Payload)
	assert.Equal(t, int64(1700000000000), d.EnqueuedAt.UnixMilli())
	assert.Zero(t, d.Raw, "Raw is set only for an envelope that does not decode")

	d, err = parseDead(rec("0|0|1000|0|", env))
	require.NoError(t, err)
	assert.Equal(t, "", d.Reason)
	assert.Equal(t, "job-7", d.ID)

	// An envelope that does not decode: kept raw, with its id when readable.
	bad := bytes.Clone(env)
	bad[0] = 99
	d, err = parseDead(rec("0|0|1000|7|corrupt", bad))
	require.NoError(t, err)
	assert.Equal(t, "corrupt", d.Reason)
	assert.Equal(t, bad, d.Raw)
	assert.Equal(t, "job-7", d.ID)
	assert.Zero(t, d.Payload)
	d, err = parseDead(rec("0|0|1000|2|no", []byte("garbage!")))
	require.NoError(t, err)
	assert.Equal(t, []byte("garbage!"), d.Raw)
	assert.Equal(t, "", d.ID)

	for _, r := range []string{
		"",
		"0|0|1000|2",     // four fields
		"0|0|later|2|no", // died is not a number
		"0|0|1000|x|no",  // reason length is not a number
		"0|0|1000|-1|no", // negative reason length
		"0|0|1000|3|no",  // reason longer than the rest
	} {
		_, err := parseDead([]byte(r))
		assert.ErrorIs(t, err, ErrCorrupt, "%q", r)
	}
}
