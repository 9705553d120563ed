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
)

// A queue with ready work and no live consumer is flagged on its page and
// in the list; a consumer that starts shows in its Workers table, with its
// host, process and handlers, and the flag goes, live; when it closes the
// flag comes back.
func TestWorkersShownAndIdleQueuesFlagged(t *testing.T) {
	ctx := browser(t)
	rctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	_, err := q.Enqueue(rctx, []byte("waits"))
	require.NoError(t, err)
	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	page := srv.URL + "/q/" + url.PathEscape(q.Name())

	var idleShown bool
	var workers, cell string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(page), chromedp.WaitVisible(`#workers`),
		chromedp.Evaluate(`!document.getElementById('idle').hidden`, &idleShown),
		chromedp.Text(`#workers tbody`, &workers)))
	assert.True(t, idleShown, "ready work and nobody to take it: flagged")
	assert.Equal(t, "no live consumer", workers)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/?q="+url.QueryEscape(q.Name())),
		chromedp.WaitVisible(`#queues`),
		chromedp.Text(`tr[data-queue="`+q.Name()+`"] td.consumers`, &cell)))
	assert.Equal(t, "none", cell)

	cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 5})
	require.NoError(t, err)
	defer cons.Close(rctx)
	// The list polls itself: the flag goes without a reload.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Poll(`document.querySelector('tr[data-queue="`+q.Name()+`"] td.consumers').textContent === '1'`, nil,
			chromedp.WithPollingTimeout(10*time.Second))))

	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(page),
		chromedp.WaitVisible(`#workers`),
		chromedp.Text(`#workers tbody tr`, &workers),
		chromedp.Evaluate(`!document.getElementById('idle').hidden`, &idleShown)))
	assert.False(t, idleShown)
	for _, want := range []string{cons.ID(), "(consumer)", "0 of 5"} {
		assert.True(t, strings.Contains(workers, want), "%q in %q", want, workers)
	}
	shoot(t, ctx, "dashboard-workers.png")

	require.NoError(t, cons.Close(rctx))
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Poll(`!document.getElementById('idle').hidden && document.querySelector('#workers tbody').textContent === 'no live consumer'`, nil,
			chromedp.WithPollingTimeout(10*time.Second))))
}

// The workers page lists every live consumer with the queues it serves
// (linked), live: one that closes leaves the table without a reload. With a
// fixed list of queues it shows only the consumers of those, and names no
// other queue.
func TestWorkersPage(t *testing.T) {
	ctx := browser(t)
	rctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	other := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 3})
	require.NoError(t, err)
	defer cons.Close(rctx)
	mc, err := prioq.NewMultiConsumer(rctx, client, prioq.MultiConfig{Queues: []string{other.Name()}})
	require.NoError(t, err)
	defer mc.Close(rctx)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		a, _ := q.Workers(rctx)
		b, _ := other.Workers(rctx)
		if len(a) == 1 && len(b) == 1 {
			break
		}
	}

	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	var table string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`#queues`),
		chromedp.Click(`#workers-link`), chromedp.WaitVisible(`#allworkers`),
		chromedp.Text(`#allworkers tbody`, &table)))
	for _, want := range []string{cons.ID() + " (consumer)", mc.ID() + " (multi)", q.Name(), other.Name(), "0 of 3"} {
		assert.Contains(t, table, want)
	}
	require.NoError(t, cons.Close(rctx))
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Poll(`!document.querySelector('#allworkers tbody').textContent.includes('`+cons.ID()+`')`, nil,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Click(`#allworkers a[href="q/`+url.PathEscape(other.Name())+`"]`), chromedp.WaitVisible(`#workers`),
		chromedp.Text(`#workers tbody`, &table)))
	assert.Contains(t, table, mc.ID())

	fixed, err := New(Config{Client: client, Queues: []string{q.Name()}})
	require.NoError(t, err)
	fsrv := httptest.NewServer(fixed)
	defer fsrv.Close()
	_, _, body := req(t, fsrv, "GET", "/api/workers", nil, nil)
	assert.NotContains(t, body, mc.ID(), "serves no queue of the fixed list")
	assert.NotContains(t, body, other.Name())
}
