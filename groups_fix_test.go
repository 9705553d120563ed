package prioq

import (
	"context"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// The tests of this file come from the review of issue 29 (groups and
// limits); each failed on a9967a7, the code it reviewed.

// keysOf lists every key of q's one shard that exists, found by SCAN of its
// prefix (group lists, gleases:G, glog:G and prio:P included), meta aside.
func keysOf(t *testing.T, c radix.Client, q *Queue) []string {
	t.Helper()
	var out []string
	s := (radix.ScannerConfig{Command: "SCAN", Pattern: scanPattern(sh(q).k.prefix) + "*", Count: 1000}).New(c)
	var k string
	for s.Next(context.Background(), &k) {
		if k != sh(q).k.meta {
			out = append(out, k)
		}
	}
	require.NoError(t, s.Close())
	return out
}

// scanPattern escapes the glob characters of a key prefix.
func scanPattern(p string) string {
	var b []byte
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '*', '?', '[', ']', '\\':
			b = append(b, '\\')
		}
		b = append(b, p[i])
	}
	return string(b)
}

// SetGroupLimit on a RangeSorted queue, which cannot hold a group's
// messages, is refused and writes nothing. Before: it wrote glimits.
func TestGroupLimitOnRangeSortedIsRefused(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: RangeSorted(0, 99, 3)})
	err := q.SetGroupLimit(ctx, "g", GroupLimit{Concurrency: 2})
	assert.ErrorIs(t, err, ErrInvalidOption)
	err = q.SetGroupLimit(ctx, "", GroupLimit{Rate: Rate{N: 5, Per: time.Second}})
	assert.ErrorIs(t, err, ErrInvalidOption)
	assert.Empty(t, keysOf(t, c, q), "nothing written")
}
