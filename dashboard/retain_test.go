package dashboard

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/testkit"
)

// The message page shows a message's progress while in flight and, once
// finished with a record, its outcome and result (the result itself only
// when payloads are shown and asked for).
func TestMessagePageProgressAndResult(t *testing.T) {
	ctx := context.Background()
	q := openNamed(t, testkit.QueueName(t), prioq.Config{})
	_, err := q.Enqueue(ctx, []byte("x"), prioq.ID("job"))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true, Lease: time.Minute})
	require.NoError(t, err)
	defer cons.Close(ctx)
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Progress(ctx, 70, "<almost>"))

	h, err := New(Config{Client: client, Authorize: allowAll, ShowPayloads: true})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(query string) string {
		resp, err := http.Get(srv.URL + "/q/" + url.PathEscape(q.Name()) + "/message?id=job" + query)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		return string(b)
	}
	page := get("")
	assert.Contains(t, page, `id="f-progress"`)
	assert.Contains(t, page, `value="70"`)
	assert.Contains(t, page, "&lt;almost&gt;")

	require.NoError(t, m.SetResult([]byte("<b>42</b>")))
	require.NoError(t, m.Ack(ctx))
	page = get("")
	assert.Contains(t, page, `<td id="f-outcome">acked</td>`)
	assert.Contains(t, page, "9 bytes")
	assert.NotContains(t, page, "42")
	page = get("&payload=1")
	assert.Contains(t, page, "&lt;b&gt;42&lt;/b&gt;")
}
