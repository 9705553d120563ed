package prioq

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Tools find queues by SCAN with MetaKeyPattern; QueueOfMetaKey gives the
// name back, for names with the bytes a pattern treats specially too, and
// refuses keys that are not a queue's meta key.
func TestMetaKeyPatternFindsQueues(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	c := newClient(t)
	base := queueName(t)
	want := []string{base + ".plain", base + ".glob*?[x]", base + ".a:b\\c"}
	for _, name := range want {
		_, err := Open(ctx, c, name, Config{})
		require.NoError(t, err)
	}
	var found []string
	sc := (radix.ScannerConfig{Command: "SCAN", Pattern: MetaKeyPattern, Count: 1000}).New(c)
	var key string
	for sc.Next(ctx, &key) {
		name, ok := QueueOfMetaKey(key)
		require.True(t, ok, "SCAN with MetaKeyPattern found %q", key)
		if strings.HasPrefix(name, base) {
			found = append(found, name)
		}
	}
	require.NoError(t, sc.Close())
	slices.Sort(found)
	slices.Sort(want)
	assert.Equal(t, want, found)

	for _, key := range []string{"prioq:{q}:ids", "prioq:{}:meta", "other:{q}:meta", "prioq:{a}b}:meta", "prioq:{q}:meta:x"} {
		_, ok := QueueOfMetaKey(key)
		assert.False(t, ok, "%q is not a meta key", key)
	}
	name, ok := QueueOfMetaKey("prioq:{orders}:meta")
	assert.True(t, ok)
	assert.Equal(t, "orders", name)
}
