package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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

// Setup: one process runs a consumer of queue x with a heartbeat (in the
// worker registry, naming this process's holder id) and a consumer of
// queue y without one; the latter holds a message of y. Wrong: the In
// flight table of y (and its JSON, and prioq peek --state in-flight) says
// "unregistered (id)", the words for a holder whose process died or closed
// and whose lease will end, though a live consumer names that process:
// HolderOf looks only at Queue.Workers, the consumers that serve y.
// docs/operating.md: "unregistered (id) when no live consumer names that
// process". Fix: resolve holders against every worker of the registry
// (the unfiltered list), in the dashboard and in cmd/prioq's holderName.
func TestReview34_HolderOfAProcessRegisteredForAnotherQueue(t *testing.T) {
	rctx := context.Background()
	x := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	y := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	cx, err := x.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cx.Close(rctx)
	cy, err := y.NewConsumer(prioq.ConsumerConfig{NoPromoter: true, NoHeartbeat: true, Lease: time.Minute})
	require.NoError(t, err)
	defer cy.Close(rctx)
	_, err = y.Enqueue(rctx, []byte("x"), prioq.ID("held"))
	require.NoError(t, err)
	m, err := cy.Receive(rctx)
	require.NoError(t, err)
	defer m.Ack(rctx)
	require.Eventually(t, func() bool { ws, err := x.Workers(rctx); return err == nil && len(ws) == 1 }, 10*time.Second, 20*time.Millisecond)

	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/queue/" + url.PathEscape(y.Name()))
	require.NoError(t, err)
	var v struct {
		Leased []struct{ ID, Holder string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	resp.Body.Close()
	require.Len(t, v.Leased, 1)
	host, _ := os.Hostname()
	assert.Equal(t, fmt.Sprintf("%s %d", host, os.Getpid()), v.Leased[0].Holder, "the holder's process is alive and registered")
}

// Setup: a queue's page opened while 5 messages are delayed (one page: no
// "later →" link), then 40 more delayed. Wrong: the live poll rewrites the
// heading ("1–20 of 45") and the rows but not the pager, rendered once by
// the template: the page says there are 45 and offers no way to the 25
// others until a reload (and, the other way, keeps a "later →" that leads
// to an empty page when the table shrank). docs/operating.md: the tables
// page, "so live updates and a shared link keep it". Fix: app.js redraws
// each pager from the JSON's pages (Prev, Next) on every poll.
func TestReview34_PagerFollowsTheLiveUpdates(t *testing.T) {
	ctx := browser(t)
	rctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	for range 5 {
		_, err := q.Enqueue(rctx, []byte("x"), prioq.Delay(time.Hour))
		require.NoError(t, err)
	}
	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	var count string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/q/"+url.PathEscape(q.Name())),
		chromedp.WaitVisible(`#delayedmsgs`), chromedp.Text(`#delayed-count`, &count)))
	require.Equal(t, "5 of 5, soonest due first", count)
	for range 40 {
		_, err := q.Enqueue(rctx, []byte("x"), prioq.Delay(2*time.Hour))
		require.NoError(t, err)
	}
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Poll(`document.querySelector('#delayed-count').textContent === '1–20 of 45, soonest due first'`, nil,
			chromedp.WithPollingTimeout(10*time.Second))))
	var next int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('a.next').length`, &next)))
	assert.Equal(t, 1, next, "the heading says 45 and a link leads to the next 20")
}
