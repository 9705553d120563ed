package prioq

import (
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
)

func TestDialerConfigWithDefaults(t *testing.T) {
	d := DialerConfig{}.withDefaults()
	assert.Equal(t, 5*time.Second, d.ConnectTimeout)
	assert.Equal(t, 5*time.Second, d.KeepAlive)
	assert.Equal(t, 10*time.Second, d.UserTimeout)
	assert.Equal(t, 5*time.Second, d.StuckAfter)
	assert.Equal(t, d, DialerConfig{ConnectTimeout: -1, KeepAlive: -1, UserTimeout: -1, StuckAfter: -1}.withDefaults(),
		"negative durations take the defaults")
	set := DialerConfig{ConnectTimeout: 1, KeepAlive: 2, UserTimeout: 3, StuckAfter: 4}
	assert.Equal(t, set, set.withDefaults())
}
