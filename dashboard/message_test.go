package dashboard

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/testkit"
)

// A message's page, reached from its row on the queue's page: its state and
// what the state says (due, lease, death), its headers, escaped, and its
// payload only when asked; a delayed message runs now through the
// confirmation. A queue name and an id with characters a URL or HTML would
// read differently reach their own page.
func TestMessagePage(t *testing.T) {
	ctx := browser(t)
	rctx := context.Background()
	q := openNamed(t, testkit.QueueName(t)+"-team/a?b#c", prioq.Config{Layout: prioq.Levels(2), MaxAttempts: 1})
	const odd = `a&b<i>"c"?d#e%f/g`
	_, err := q.Enqueue(rctx, []byte("<b>secret</b> payload"), prioq.ID(odd), prioq.Priority(1), prioq.Delay(time.Hour),
		prioq.Headers(map[string]string{"trace": "<script>alert(1)</script>", "tenant": "acme"}))
	require.NoError(t, err)
	for _, id := range []string{"working", "broken", "waiting"} {
		_, err := q.Enqueue(rctx, []byte("x"), prioq.ID(id))
		require.NoError(t, err)
	}
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true, Lease: time.Minute})
	require.NoError(t, err)
	defer cons.Close(rctx)
	working, err := cons.Receive(rctx)
	require.NoError(t, err)
	broken, err := cons.Receive(rctx)
	require.NoError(t, err)
	require.NoError(t, broken.Retry(rctx, 0, "disk <full>"))

	h, err := New(Config{Client: client, Authorize: allowAll, ShowPayloads: true})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	page := srv.URL + "/q/" + url.PathEscape(q.Name())

	// From the delayed table to the page.
	var state, due, headers, hidden string
	var payloadShown int
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(page), chromedp.WaitVisible(`#delayedmsgs a.msg`),
		chromedp.Sleep(2500*time.Millisecond), // a poll redrew the tables: their links are the script's
		chromedp.Click(`#delayedmsgs a.msg`), chromedp.WaitVisible(`#fields`),
		chromedp.Text(`#f-state`, &state), chromedp.Text(`#f-due`, &due), chromedp.Text(`#headers`, &headers),
		chromedp.Evaluate(`document.querySelectorAll('#payload').length`, &payloadShown),
		chromedp.Text(`#show-payload`, &hidden)))
	assert.Equal(t, "delayed", state)
	assert.Contains(t, due, "(in 59m")
	assert.Contains(t, headers, "<script>alert(1)</script>", "a header is text, not markup")
	assert.Contains(t, headers, "acme")
	assert.Equal(t, 0, payloadShown, "the payload only on request")
	var id, payload string
	require.NoError(t, chromedp.Run(ctx, chromedp.Text(`#msg-id`, &id), chromedp.Click(`#show-payload`),
		chromedp.WaitVisible(`#payload`), chromedp.Text(`#payload`, &payload)))
	assert.Equal(t, odd, id)
	assert.Equal(t, `"<b>secret</b> payload"`, payload)
	shoot(t, ctx, "dashboard-message.png")

	// Run it now, through the confirmation.
	var done string
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#run-now`), chromedp.WaitVisible(`#confirm`),
		chromedp.Click(`#confirm`), chromedp.WaitVisible(`#done`), chromedp.Text(`#done`, &done)))
	assert.Contains(t, done, "is ready now")
	st, err := q.Message(rctx, odd)
	require.NoError(t, err)
	assert.Equal(t, prioq.MessageReady, st.State)

	// In flight and dead, from their tables.
	var token, reason string
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#leased a.msg`), chromedp.WaitVisible(`#f-token`),
		chromedp.Text(`#f-token`, &token), chromedp.NavigateBack(), chromedp.WaitVisible(`#deadletters a.msg`),
		chromedp.Click(`#deadletters a.msg`), chromedp.WaitVisible(`#f-reason`), chromedp.Text(`#f-reason`, &reason)))
	leased, err := q.Message(rctx, "working")
	require.NoError(t, err)
	assert.Equal(t, leased.LeaseToken, token)
	assert.NotEmpty(t, token)
	assert.Equal(t, "disk <full>", reason)
	_ = working

	// Ready: Cancel offered, no Run now; gone: 404; a bad id: 400.
	code, _, body := req(t, srv, "GET", "/q/"+url.PathEscape(q.Name())+"/message?id=waiting", nil, nil)
	require.Equal(t, 200, code)
	assert.Contains(t, body, `id="cancel-msg"`)
	assert.NotContains(t, body, `id="run-now"`)
	code, _, _ = req(t, srv, "GET", "/q/"+url.PathEscape(q.Name())+"/message?id=nowhere", nil, nil)
	assert.Equal(t, 404, code)
	code, _, _ = req(t, srv, "GET", "/q/"+url.PathEscape(q.Name())+"/message?id=a+b", nil, nil)
	assert.Equal(t, 400, code)

	// Payloads hidden (the default) and read-only: no payload even when
	// asked, no actions.
	ro, err := New(Config{Client: client})
	require.NoError(t, err)
	rsrv := httptest.NewServer(ro)
	defer rsrv.Close()
	code, _, body = req(t, rsrv, "GET", "/q/"+url.PathEscape(q.Name())+"/message?payload=1&id="+url.QueryEscape(odd), nil, nil)
	require.Equal(t, 200, code)
	assert.Contains(t, body, `id="payload-hidden"`)
	assert.NotContains(t, body, "secret")
	assert.False(t, strings.Contains(body, `id="cancel-msg"`) || strings.Contains(body, `id="run-now"`), "read-only: no actions")
}
