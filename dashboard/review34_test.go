package dashboard

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// Setup: a queue of two shards with a delayed message, and a page link
// whose delayed_from is the largest int (pageOffsets takes any int >= 0).
// Wrong: the page's read calls Queue.Scheduled(MaxInt, 20), whose merge of
// the shards slices all[min(start, len):min(start+n, len)]: start+n wraps
// negative and the slice panics; the handler dies and the connection is
// cut (no answer at all). The dashboard made that offset a URL parameter.
// Fix: browse computes the end without overflow (min(start, len-n)+n, or
// the k it computes above), and pageOffsets could refuse a first row
// beyond a bound (400).
func TestReview34_HugePageOffsetOnShardedQueue(t *testing.T) {
	rctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2), Shards: 2})
	_, err := q.Enqueue(rctx, []byte("x"), prioq.Delay(time.Hour))
	require.NoError(t, err)
	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, p := range []string{"/api/queue/", "/q/"} {
		for _, param := range []string{"delayed_from", "inflight_from", "dead_from"} {
			resp, err := http.Get(srv.URL + p + url.PathEscape(q.Name()) + "?" + param + "=" + strconv.Itoa(int(^uint(0)>>1)))
			require.NoError(t, err, "%s %s: the handler answers", p, param)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.True(t, resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusBadRequest, "%s %s: %d %s", p, param, resp.StatusCode, body)
		}
	}
}
