package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/testkit"
)

// openNamed creates a queue with exactly this name and deletes its keys
// when the test ends.
func openNamed(t *testing.T, name string, cfg prioq.Config) *prioq.Queue {
	t.Helper()
	q, err := prioq.Open(context.Background(), client, name, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = q.Purge(context.Background())
		_, _ = q.PurgeDead(context.Background())
		_ = client.Do(context.Background(), radix.Cmd(nil, "DEL", "prioq:{"+name+"}:meta", "prioq:{"+name+"}:counts"))
	})
	return q
}

// Without Config.Queues, queues created after the dashboard started appear
// in the open list without a reload, and their pages work at once (no 404
// for a queue the dashboard did not know at start).
func TestQueuesCreatedLaterAppear(t *testing.T) {
	ctx := browser(t)
	base := testkit.QueueName(t)
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	var empty string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/?q="+url.QueryEscape(base)),
		chromedp.WaitVisible(`#queues`), chromedp.Text(`#queues tbody`, &empty)))
	assert.Contains(t, empty, "no queue name contains")

	// Its page, the moment it exists, before any list has seen it.
	first := openNamed(t, base+"-first", prioq.Config{})
	code, _, body := req(t, srv, "GET", "/q/"+url.PathEscape(first.Name()), nil, nil)
	assert.Equal(t, 200, code, body)

	second := openNamed(t, base+"-second", prioq.Config{})
	_, err = second.Enqueue(context.Background(), []byte("x"))
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, chromedp.Run(ctx, chromedp.Poll(`document.querySelectorAll('#queues tbody tr[data-queue]').length === 2`, nil,
		chromedp.WithPollingTimeout(10*time.Second))), "both appear in the open list")
	t.Logf("a new queue appeared in the open list after %v", time.Since(start))
	var ready string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Text(`tr[data-queue="`+second.Name()+`"] td.ready`, &ready),
		chromedp.Click(`a[href="q/`+second.Name()+`"]`),
		chromedp.WaitVisible(`#ready`)))
	assert.Equal(t, "1", ready)
}

// Names with / ? # % (and the spaces a name cannot hold) are escaped in
// every link, form and request: each queue's page and actions reach that
// queue, in the browser and by HTTP.
func TestNamesEscapedEverywhere(t *testing.T) {
	ctx := browser(t)
	base := testkit.QueueName(t)
	names := []string{base + "-team/alpha", base + "-a?b=1", base + "-c#d", base + "-50%25off", base + "-x%2Fy"}
	qs := map[string]*prioq.Queue{}
	for i, n := range names {
		qs[n] = openNamed(t, n, prioq.Config{Layout: prioq.Levels(2), MaxAttempts: 1})
		for range i + 1 {
			_, err := qs[n].Enqueue(context.Background(), []byte("x"))
			require.NoError(t, err)
		}
	}
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	for i, n := range names {
		for _, p := range []string{"/q/", "/api/queue/", "/api/stats/"} {
			code, _, body := req(t, srv, "GET", p+url.PathEscape(n), nil, nil)
			require.Equal(t, 200, code, "%s%s", p, n)
			if p == "/q/" {
				assert.Contains(t, body, fmt.Sprintf(`<span id="ready">%d</span>`, i+1), n)
			}
		}
		code, _, body := req(t, srv, "GET", "/q/"+url.PathEscape(n)+"/purge", nil, nil)
		require.Equal(t, 200, code)
		assert.Contains(t, body, fmt.Sprintf("%d ready and 0 delayed", i+1), "the confirmation counts this queue: %s", n)
	}
	_, _, list := req(t, srv, "GET", "/?q="+url.QueryEscape(base), nil, nil)
	for _, n := range names {
		assert.Contains(t, list, `href="q/`+url.PathEscape(n)+`"`)
	}

	// In the browser: from the list to each page, then pause one through its
	// confirmation, and purge another.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/?q="+url.QueryEscape(base)), chromedp.WaitVisible(`#queues`)))
	shoot(t, ctx, "dashboard-list.png")
	for i, n := range names {
		var h1, ready string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(srv.URL+"/?q="+url.QueryEscape(base)),
			chromedp.Click(fmt.Sprintf(`#queues tbody tr:nth-child(%d) a`, indexOf(t, names, n)+1)),
			chromedp.WaitVisible(`#ready`),
			chromedp.Poll(`document.getElementById('asof').className === 'asof' && !!document.getElementById('chart')`, nil),
			chromedp.Text(`h1`, &h1), chromedp.Text(`#ready`, &ready)))
		assert.True(t, strings.HasPrefix(h1, n+" "), "%q", h1)
		assert.Equal(t, fmt.Sprint(i+1), ready, n)
	}
	alpha := names[0]
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/q/"+url.PathEscape(alpha)),
		chromedp.Click(`#pause-toggle`), chromedp.WaitVisible(`#confirm`),
		chromedp.Click(`#confirm`), chromedp.WaitVisible(`#done`)))
	assert.True(t, paused(t, qs[alpha]), "team/alpha's Pause paused team/alpha")
	pct := names[3]
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/q/"+url.PathEscape(pct)),
		chromedp.Click(`#purge`), chromedp.WaitVisible(`#confirm`),
		chromedp.Click(`#confirm`), chromedp.WaitVisible(`#done`)))
	for _, n := range names {
		st, err := qs[n].Stats(context.Background())
		require.NoError(t, err)
		assert.Equal(t, n == alpha, st.Paused, n)
		if n == pct {
			assert.Zero(t, st.Ready, n)
		} else {
			assert.Positive(t, st.Ready, "%s untouched", n)
		}
	}
	var back string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/q/"+url.PathEscape(names[1])+"/purge"),
		chromedp.Click(`#cancel`), chromedp.WaitVisible(`#ready`), chromedp.Location(&back)))
	assert.Equal(t, srv.URL+"/q/"+url.PathEscape(names[1]), back, "Cancel goes back to the queue")
}

// indexOf is n's row in the list, which is sorted by name.
func indexOf(t *testing.T, names []string, n string) int {
	i := slices.Index(slices.Sorted(slices.Values(names)), n)
	require.GreaterOrEqual(t, i, 0, n)
	return i
}

// A handler with Config.Queues serves those only: another queue's page is
// 404, even one that exists.
func TestFixedQueuesOnly(t *testing.T) {
	q := newQueue(t, prioq.Config{})
	other := newQueue(t, prioq.Config{})
	h, err := New(Config{Client: client, Queues: []string{q.Name()}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	code, _, _ := req(t, srv, "GET", "/q/"+url.PathEscape(q.Name()), nil, nil)
	assert.Equal(t, 200, code)
	code, _, _ = req(t, srv, "GET", "/q/"+url.PathEscape(other.Name()), nil, nil)
	assert.Equal(t, http.StatusNotFound, code)
}
