package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// A queue's page shows its delayed messages (soonest due first) and those
// in flight (soonest lease end first), each table live: an ack empties the
// in-flight table without a reload.
func TestQueuePageShowsDelayedAndInFlight(t *testing.T) {
	ctx := browser(t)
	rctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	for _, id := range []string{"in-2h", "in-1h"} {
		d := time.Hour
		if id == "in-2h" {
			d = 2 * time.Hour
		}
		_, err := q.Enqueue(rctx, []byte("x"), prioq.ID(id), prioq.Delay(d))
		require.NoError(t, err)
	}
	_, err := q.Enqueue(rctx, []byte("x"), prioq.ID("working"))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true, Lease: time.Minute})
	require.NoError(t, err)
	defer cons.Close(rctx)
	m, err := cons.Receive(rctx)
	require.NoError(t, err)

	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	var delayed, delayedCount, leased string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/q/"+url.PathEscape(q.Name())),
		chromedp.WaitVisible(`#leased`),
		chromedp.Text(`#delayedmsgs tbody`, &delayed), chromedp.Text(`#delayed-count`, &delayedCount),
		chromedp.Text(`#leased tbody`, &leased)))
	assert.Less(t, strings.Index(delayed, "in-1h"), strings.Index(delayed, "in-2h"), "soonest due first: %q", delayed)
	assert.True(t, strings.Index(delayed, "in-1h") >= 0, delayed)
	assert.Equal(t, "2 of 2, soonest due first", delayedCount)
	assert.Contains(t, leased, "working")
	// Its holder: this process, by host and process id, from the worker
	// registry (the page may have been read before the first heartbeat).
	host, _ := os.Hostname()
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Poll(fmt.Sprintf(`document.querySelector('#leased tbody').textContent.includes(%q)`, fmt.Sprintf("%s %d", host, os.Getpid())), nil,
			chromedp.WithPollingTimeout(10*time.Second))))
	// A holder no live consumer names (a consumer without heartbeat).
	quiet, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true, NoHeartbeat: true, Lease: time.Minute})
	require.NoError(t, err)
	defer quiet.Close(rctx)
	_, err = q.Enqueue(rctx, []byte("x"), prioq.ID("quiet"))
	require.NoError(t, err)
	qm, err := quiet.Receive(rctx)
	require.NoError(t, err)
	require.NoError(t, cons.Close(rctx)) // its record leaves: the first message's holder is unregistered too
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Poll(`document.querySelector('#leased tbody').textContent.split('unregistered (').length === 3`, nil,
			chromedp.WithPollingTimeout(10*time.Second))))
	require.NoError(t, qm.Ack(rctx))
	require.NoError(t, m.Ack(rctx))
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Poll(`document.querySelector('#leased tbody').textContent === 'nothing in flight'`, nil,
			chromedp.WithPollingTimeout(10*time.Second))))
}

// A delayed message runs now, and another is cancelled, each by clicking
// through its confirmation (which changes nothing and says when it was due);
// without the right the buttons are not there.
func TestRunNowAndCancelFromThePage(t *testing.T) {
	ctx := browser(t)
	rctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	for _, id := range []string{"report", "reminder"} {
		_, err := q.Enqueue(rctx, []byte("x"), prioq.ID(id), prioq.Delay(time.Hour))
		require.NoError(t, err)
	}
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	var what, done string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/q/"+url.PathEscape(q.Name())),
		chromedp.WaitVisible(`#delayedmsgs`),
		chromedp.Click(`a.run-now[data-id="report"]`),
		chromedp.WaitVisible(`#confirm`), chromedp.Text(`#what`, &what)))
	// An hour from the enqueue, as the page rounds it: 59m… or, within half
	// a second of the enqueue, 1h0m0s.
	assert.Regexp(t, `due in (59m\d+s|1h0m0s)`, what)
	st, err := q.Stats(rctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), st.Delayed, "a confirmation page changes nothing")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#confirm`), chromedp.WaitVisible(`#done`), chromedp.Text(`#done`, &done)))
	assert.Equal(t, `The message "report" is ready now.`, done)
	st, err = q.Stats(rctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Ready)
	assert.Equal(t, int64(1), st.Delayed)

	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`a.cancel[data-id="reminder"]`),
		chromedp.WaitVisible(`#confirm`), chromedp.Click(`#confirm`), chromedp.WaitVisible(`#done`),
		chromedp.Text(`#done`, &done)))
	assert.Equal(t, `Cancelled the message "reminder".`, done)
	st, err = q.Stats(rctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.Delayed)

	// Read-only (no Authorize): no buttons.
	_, err = q.Enqueue(rctx, []byte("x"), prioq.ID("later"), prioq.Delay(time.Hour))
	require.NoError(t, err)
	ro, err := New(Config{Client: client})
	require.NoError(t, err)
	rsrv := httptest.NewServer(ro)
	defer rsrv.Close()
	var buttons int
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(rsrv.URL+"/q/"+url.PathEscape(q.Name())),
		chromedp.WaitVisible(`#delayedmsgs`), chromedp.Sleep(2500*time.Millisecond), // a poll redrew the table
		chromedp.Evaluate(`document.querySelectorAll('#delayedmsgs a.button').length`, &buttons)))
	assert.Equal(t, 0, buttons)
}

// The delayed, in-flight and dead tables page (issue 32: "Browse ready,
// delayed, in flight and dead, paged"): the heading says which rows, the
// links move a page and keep it through the live updates; a bad page is
// refused.
func TestStateTablesPage(t *testing.T) {
	ctx := browser(t)
	rctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	for i := range 45 {
		_, err := q.Enqueue(rctx, []byte("x"), prioq.ID(fmt.Sprintf("d%02d", i)), prioq.Delay(time.Hour+time.Duration(i)*time.Minute))
		require.NoError(t, err)
	}
	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	var count, rows, href string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/q/"+url.PathEscape(q.Name())),
		chromedp.WaitVisible(`#delayedmsgs`), chromedp.Text(`#delayed-count`, &count),
		chromedp.AttributeValue(`a.next`, "href", &href, nil)))
	assert.Equal(t, "1–20 of 45, soonest due first", count)
	assert.Equal(t, "?delayed_from=20", href)
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`a.next`), chromedp.WaitVisible(`a.prev`),
		chromedp.Sleep(2500*time.Millisecond), // a poll redrew the tables
		chromedp.Text(`#delayed-count`, &count), chromedp.Text(`#delayedmsgs tbody`, &rows)))
	assert.Equal(t, "21–40 of 45, soonest due first", count)
	assert.True(t, strings.HasPrefix(strings.TrimSpace(rows), "d20") && strings.Contains(rows, "d39") && !strings.Contains(rows, "d40"), rows)
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`a.next`), chromedp.WaitVisible(`a.prev`),
		chromedp.Text(`#delayed-count`, &count)))
	assert.Equal(t, "41–45 of 45, soonest due first", count)
	var next int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('a.next').length`, &next)))
	assert.Equal(t, 0, next, "no page after the last")

	for _, bad := range []string{"delayed_from=-1", "inflight_from=x", "dead_from=1e3"} {
		for _, p := range []string{"/q/", "/api/queue/"} {
			resp, err := http.Get(srv.URL + p + url.PathEscape(q.Name()) + "?" + bad)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s%s: %s", p, bad, body)
			assert.Contains(t, string(body), "not a row number")
		}
	}
}
