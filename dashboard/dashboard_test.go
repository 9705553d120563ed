package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/testkit"
	"github.com/prioq/prioq/internal/testkit/testq"
)

var client radix.Client

func TestMain(m *testing.M) {
	os.Exit(testkit.RunWithRedis(m, 8, func(_ string, c radix.Client) { client = c }))
}

func newQueue(t *testing.T, cfg prioq.Config) *prioq.Queue { return testq.Open(t, client, cfg) }

// browser starts headless Chromium (Debian's package); without it the test
// skips, except under CI=true.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	path := ""
	for _, p := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p2, err := exec.LookPath(p); err == nil {
			path = p2
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("the dashboard test needs chromium under CI=true")
		}
		t.Skip("skipping: no chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1100, 1400))
	opts = append(opts, extra...)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel3)
	return ctx
}

// allowAll is an Authorize hook that lets every request do everything, as
// a host program behind its own authentication would.
func allowAll(*http.Request, Action, string) error { return nil }

// shoot saves a screenshot into PRIOQ_SCREENSHOT_DIR (docs/ when the docs'
// pictures are made) as name.
func shoot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("PRIOQ_SCREENSHOT_DIR")
	if dir == "" {
		return
	}
	var shot []byte
	require.NoError(t, chromedp.Run(ctx, chromedp.FullScreenshot(&shot, 100)))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), shot, 0o644))
}

// In a real browser: the numbers follow enqueues, a dead letter is requeued
// and the queue paused by clicking through their confirmations, which say
// how many messages they change; Redis is checked after each.
func TestDashboardInBrowser(t *testing.T) {
	ctx := browser(t)
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(3), MaxAttempts: 1})
	rctx := context.Background()
	_, err := q.Enqueue(rctx, []byte("card 4111"), prioq.ID("order-1"), prioq.Priority(2))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	require.NoError(t, err)
	defer cons.Close(rctx)
	m, err := cons.Receive(rctx)
	require.NoError(t, err)
	require.NoError(t, m.Retry(rctx, 0, "payment declined")) // MaxAttempts 1: dead

	h, err := New(Config{Client: client, Queues: []string{q.Name()}, Authorize: allowAll})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h)) // mounted under a prefix, as an app would
	srv := httptest.NewServer(mux)
	defer srv.Close()

	var ready, dead, body string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/ops/"),
		chromedp.WaitVisible(`#queues`),
		chromedp.Click(`a[href="q/`+q.Name()+`"]`),
		chromedp.WaitVisible(`#ready`),
		chromedp.Text(`#ready`, &ready),
		chromedp.Text(`#dead`, &dead),
		chromedp.Text(`body`, &body),
	))
	assert.Equal(t, "0", ready)
	assert.Equal(t, "1", dead)
	assert.Contains(t, body, "payment declined")
	assert.NotContains(t, body, "card 4111", "payloads hidden by default")

	// Enqueues show up without a reload (the page polls every 2 s).
	for i := 0; i < 5; i++ {
		_, err := q.Enqueue(rctx, []byte("x"), prioq.Priority(int64(i%3)))
		require.NoError(t, err)
	}
	require.NoError(t, chromedp.Run(ctx, chromedp.Poll(`document.getElementById('ready').textContent === '5'`, nil,
		chromedp.WithPollingTimeout(10*time.Second))))

	// Requeue the dead letter by clicking, through its confirmation.
	var what string
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`a.requeue[data-id="order-1"]`),
		chromedp.WaitVisible(`#confirm`), chromedp.Text(`#what`, &what)))
	assert.Contains(t, what, "1 message goes back")
	assert.Contains(t, what, "payment declined")
	st, err := q.Stats(rctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Dead, "a confirmation page changes nothing")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#confirm`),
		chromedp.WaitVisible(`#done`), chromedp.WaitNotPresent(`a.requeue[data-id="order-1"]`)))
	st, err = q.Stats(rctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.Dead)
	assert.Equal(t, int64(6), st.Ready)

	// Pause by clicking: the confirmation counts the ready messages.
	var button string
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#pause-toggle`),
		chromedp.WaitVisible(`#confirm`), chromedp.Text(`#confirm`, &button)))
	assert.Equal(t, "Pause (6 ready wait)", button)
	shoot(t, ctx, "dashboard-confirm.png")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#confirm`),
		chromedp.WaitVisible(`//a[@id="pause-toggle" and contains(., "Resume")]`, chromedp.BySearch),
		chromedp.Sleep(3*time.Second))) // a chart with a few points
	st, err = q.Stats(rctx)
	require.NoError(t, err)
	assert.True(t, st.Paused)
	shoot(t, ctx, "dashboard.png")
}

// Under a steady load (a producer and a consumer), the list and the queue's
// page show enqueue and ack rates above zero, computed from the totals that
// the stats endpoint serves.
func TestDashboardShowsRates(t *testing.T) {
	ctx := browser(t)
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(3), MaxAttempts: 2})
	load, stop := context.WithCancel(context.Background())
	defer stop()
	cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 4})
	require.NoError(t, err)
	defer cons.Close(context.Background())
	done := make(chan struct{}, 2)
	var handled atomic.Int64
	go func() {
		// Slow enough for lane 0 to wait behind the others; 1 in 20 fails.
		_ = cons.Run(load, func(context.Context, *prioq.Message) error {
			time.Sleep(60 * time.Millisecond)
			if handled.Add(1)%20 == 0 {
				return errors.New("upstream timeout")
			}
			return nil
		})
		done <- struct{}{}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-load.Done():
				return
			case <-tick.C:
				n := handled.Load() + time.Now().UnixNano()
				opts := []prioq.Option{prioq.Priority(n % 3)}
				if n%5 == 0 {
					opts = append(opts, prioq.Delay(2*time.Second))
				}
				_, _ = q.Enqueue(load, []byte("x"), opts...)
			}
		}
	}()

	h, err := New(Config{Client: client, Queues: []string{q.Name()}, Hosts: []string{"example.com"}, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	positive := func(sel string) chromedp.Action {
		return chromedp.Poll(`parseFloat(document.querySelector('`+sel+`').textContent) > 0`, nil,
			chromedp.WithPollingTimeout(15*time.Second))
	}
	var enq, ack, failed string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#queues`),
		positive(`tr[data-queue] .enq-rate`), positive(`tr[data-queue] .ack-rate`),
		chromedp.Click(`a[href="q/`+q.Name()+`"]`),
		chromedp.WaitVisible(`#rates`),
		positive(`#enq-rate`), positive(`#ack-rate`), positive(`#fail-rate`),
		chromedp.Text(`#enq-rate`, &enq), chromedp.Text(`#ack-rate`, &ack), chromedp.Text(`#fail-rate`, &failed),
	))
	t.Logf("shown: %s enqueued/s, %s acked/s (the producer sends about 50/s), %s failed (1 in 20 handlers fail)", enq, ack, failed)
	assert.Regexp(t, `^\d+\.\d%$`, failed)
	if os.Getenv("PRIOQ_SCREENSHOT_DIR") != "" {
		require.NoError(t, chromedp.Run(ctx, chromedp.Sleep(20*time.Second)))
		shoot(t, ctx, "dashboard-under-load.png")
	}
	stop()
	<-done
	<-done

	// The endpoint's totals are the queue's.
	st, err := q.Stats(context.Background())
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/stats/"+q.Name(), nil))
	require.Equal(t, 200, rec.Code)
	assert.Contains(t, rec.Body.String(), fmt.Sprintf(`"enqueued":%d`, st.Enqueued))
	assert.Contains(t, rec.Body.String(), fmt.Sprintf(`"acked":%d`, st.Acked))
	assert.Contains(t, rec.Body.String(), fmt.Sprintf(`"retried":%d`, st.Retried))
	assert.Positive(t, st.Retried, "1 in 20 handlers failed")
	assert.Greater(t, st.Enqueued, int64(0))
}

// A queue of several shards: its page shows a row per shard whose depth
// follows enqueues without a reload, and the stats endpoint lists the shards;
// a queue of one shows no shard table.
func TestDashboardShowsShards(t *testing.T) {
	ctx := browser(t)
	rctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2), Shards: 3})
	one := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	h, err := New(Config{Client: client, Queues: []string{q.Name(), one.Name()}, Hosts: []string{"example.com"}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	var rows []string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/q/"+q.Name()),
		chromedp.WaitVisible(`#shards`),
		chromedp.Evaluate(`[...document.querySelectorAll('#shards tbody tr')].map(r => r.textContent)`, &rows),
	))
	require.Len(t, rows, 3)
	for i, slot := range q.ShardSlots() {
		assert.Equal(t, fmt.Sprintf("%d%d-0000", i, slot), strings.ReplaceAll(rows[i], " ", ""), "shard, slot, node, ready, delayed, in flight, dead")
	}

	for i := range 30 {
		_, err := q.Enqueue(rctx, []byte("x"), prioq.ID(fmt.Sprintf("job-%d", i)))
		require.NoError(t, err)
	}
	st, err := q.Stats(rctx)
	require.NoError(t, err)
	for i, s := range st.Shards {
		require.Positive(t, s.Ready, "30 ids spread over 3 shards")
		require.NoError(t, chromedp.Run(ctx, chromedp.Poll(
			fmt.Sprintf(`document.getElementById('shard-%d-ready').textContent === '%d'`, i, s.Ready), nil,
			chromedp.WithPollingTimeout(10*time.Second))), "shard %d shows %d ready without a reload", i, s.Ready)
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/stats/"+q.Name(), nil))
	require.Equal(t, 200, rec.Code)
	var js struct {
		Shards []struct {
			Shard, Slot int
			Ready       int64
		}
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &js))
	require.Len(t, js.Shards, 3)
	for i, s := range js.Shards {
		assert.Equal(t, i, s.Shard)
		assert.Equal(t, st.Shards[i].Slot, s.Slot)
		assert.Equal(t, st.Shards[i].Ready, s.Ready)
	}

	var present bool
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/q/"+one.Name()),
		chromedp.WaitVisible(`#ready`),
		chromedp.Evaluate(`document.getElementById('shards') !== null`, &present),
	))
	assert.False(t, present, "a queue of one shard shows no shard table")
}

// With 10,000 queues the list shows a page at a time, finds a queue by name
// and sorts by depth, in a real browser; the first page's time is logged.
func TestDashboardTenThousandQueues(t *testing.T) {
	ctx := browser(t)
	base := testkit.QueueName(t)
	names := testq.OpenMany(t, client, base, 10000, prioq.Config{Layout: prioq.Levels(1)})
	rctx := context.Background()
	deep, err := prioq.OpenExisting(rctx, client, names[7777], prioq.Config{})
	require.NoError(t, err)
	for range 3 {
		_, err := deep.Enqueue(rctx, []byte("x"))
		require.NoError(t, err)
	}
	h, err := New(Config{Client: client, Queues: names})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	var rows int
	var pages, first string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate("about:blank"))) // the browser is up
	start := time.Now()
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#queues`),
	))
	t.Logf("first page of 10,000 queues in the browser: %v", time.Since(start))
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Evaluate(`document.querySelectorAll('#queues tbody tr').length`, &rows),
		chromedp.Text(`#pages`, &pages),
		chromedp.Text(`#queues tbody tr:first-child td:first-child`, &first),
	))
	assert.Equal(t, 50, rows)
	assert.Equal(t, "200", pages)
	assert.Equal(t, names[0], first)

	// The next page, then a search, then the deepest first.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`#next`),
		chromedp.WaitVisible(`//span[@id="page" and text()="2"]`, chromedp.BySearch),
		chromedp.Text(`#queues tbody tr:first-child td:first-child`, &first),
	))
	assert.Equal(t, names[50], first)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.SetValue(`#search input[name="q"]`, "-0777"),
		chromedp.Submit(`#search input[name="q"]`),
		chromedp.WaitVisible(`//p[@id="found" and starts-with(., "1–10 of 10 found among 10000")]`, chromedp.BySearch),
		chromedp.Evaluate(`document.querySelectorAll('#queues tbody tr').length`, &rows),
	))
	assert.Equal(t, 10, rows, "-07770 ... -07779")
	start = time.Now()
	var ready string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`a.sort[data-sort="ready"]`),
		chromedp.WaitVisible(`table#queues[data-sort="ready"]`),
		chromedp.Text(`#queues tbody tr:first-child td:first-child`, &first),
		chromedp.Text(`#queues tbody tr:first-child td.ready`, &ready),
	))
	t.Logf("sorted by depth (of the 10 found): %v", time.Since(start))
	assert.Equal(t, names[7777], first)
	assert.Equal(t, "3", ready)

	// Sorted by depth over all 10,000 (a snapshot of every queue's figures).
	start = time.Now()
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/?sort=ready"),
		chromedp.WaitVisible(`#queues`),
		chromedp.Text(`#queues tbody tr:first-child td:first-child`, &first),
	))
	t.Logf("all 10,000 sorted by depth (every queue read once, then reused for %v): %v", snapshotTTL, time.Since(start))
	assert.Equal(t, names[7777], first)

	// Without Config.Queues the list is every queue on the client, found by
	// a SCAN at most every QueueListTTL: the first page of a search, cold.
	live, err := New(Config{Client: client})
	require.NoError(t, err)
	lsrv := httptest.NewServer(live)
	defer lsrv.Close()
	start = time.Now()
	resp, err := http.Get(lsrv.URL + "/?q=" + url.QueryEscape(base))
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("first page of 10,000 queues found by SCAN (no Config.Queues), cold: %v", time.Since(start))
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(page), "1–50 of 10000 found among")
}

// A queue's page shows its most loaded groups, with their limits and which
// wait at theirs, in a real browser.
func TestDashboardShowsGroups(t *testing.T) {
	ctx := browser(t)
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(3)})
	rctx := context.Background()
	for i := 0; i < 3; i++ {
		_, err := q.Enqueue(rctx, []byte("x"), prioq.Group("acme"))
		require.NoError(t, err)
	}
	_, err := q.Enqueue(rctx, []byte("x"), prioq.Group("zeta"))
	require.NoError(t, err)
	require.NoError(t, q.SetGroupLimit(rctx, "acme", prioq.GroupLimit{Concurrency: 1}))
	require.NoError(t, q.SetGroupLimit(rctx, "zeta", prioq.GroupLimit{Rate: prioq.Rate{N: 1, Per: time.Hour}}))
	_, err = q.Enqueue(rctx, []byte("x"), prioq.Group("zeta"))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cons.Close(rctx)
	var got []*prioq.Message
	for i := 0; i < 2; i++ { // acme/0 and zeta/0; acme then waits at its limit
		m, err := cons.Receive(rctx)
		require.NoError(t, err)
		got = append(got, m)
	}
	short, cancel := context.WithTimeout(rctx, 300*time.Millisecond)
	_, err = cons.Receive(short) // parks acme, and zeta (one an hour)
	cancel()
	require.Error(t, err)

	h, err := New(Config{Client: client, Queues: []string{q.Name()}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	var first, second string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/q/"+q.Name()),
		chromedp.WaitVisible(`#groups`),
		chromedp.Text(`#groups tbody tr:first-child`, &first),
		chromedp.Text(`#groups tbody tr:nth-child(2)`, &second),
	))
	assert.Equal(t, []string{"acme", "2", "1", "1", "-", "yes"}, strings.Fields(first))
	assert.Equal(t, []string{"zeta", "1", "1", "-", "1/1h0m0s", "rate"}, strings.Fields(second))
	for _, m := range got {
		require.NoError(t, m.Ack(rctx))
	}
}
