package store

import (
	"testing"

	"github.com/prioq/prioq/internal/testkit/assert"
)

// serverMs reads Redis TIME (seconds, microseconds) as unix milliseconds.
func TestServerMs(t *testing.T) {
	assert.Equal(t, int64(1700000000123), serverMs([]string{"1700000000", "123456"}))
	assert.Equal(t, int64(1000), serverMs([]string{"1", "999"}), "microseconds round down")
	assert.Equal(t, int64(1999), serverMs([]string{"1", "999999"}))
	assert.Equal(t, int64(0), serverMs(nil))
	assert.Equal(t, int64(0), serverMs([]string{"1700000000"}))
	assert.Equal(t, int64(0), serverMs([]string{"x", "1"}))
	assert.Equal(t, int64(0), serverMs([]string{"1", ""}))
}
