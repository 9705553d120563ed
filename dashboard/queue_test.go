package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// kill makes n dead letters in q (MaxAttempts 1), reason "boom i".
func kill(t *testing.T, q *prioq.Queue, n int) {
	t.Helper()
	ctx := context.Background()
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cons.Close(ctx)
	for i := range n {
		_, err := q.Enqueue(ctx, []byte("x"), prioq.Priority(1))
		require.NoError(t, err)
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Retry(ctx, 0, fmt.Sprintf("boom %d", i)))
	}
}

// Every table of a queue's page is live, from the same reading as the
// numbers above it: dead letters and groups that appear after the page was
// loaded show up in their tables, the counts beside the tables agree with
// the numbers, and the page says when its reading was taken.
func TestQueuePageTablesLive(t *testing.T) {
	ctx := browser(t)
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2), MaxAttempts: 1})
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	var asof0, rows string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/q/"+url.PathEscape(q.Name())),
		chromedp.WaitVisible(`#deadletters`), chromedp.Text(`#asof-time`, &asof0),
		chromedp.Text(`#deadletters tbody`, &rows)))
	assert.Equal(t, "no dead letters", rows)

	kill(t, q, 3)
	for range 2 {
		_, err := q.Enqueue(context.Background(), []byte("x"), prioq.Group("acme"))
		require.NoError(t, err)
	}
	var dead, deadCount, peekCount, groupRow, asof1 string
	var deadRows int
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Poll(`document.querySelectorAll('#deadletters tbody tr:not(.empty)').length === 3 && document.querySelectorAll('#groups tbody tr:not(.empty)').length === 1`, nil,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text(`#dead`, &dead), chromedp.Text(`#dead-count`, &deadCount), chromedp.Text(`#peek-count`, &peekCount),
		chromedp.Evaluate(`document.querySelectorAll('#deadletters a.requeue').length`, &deadRows),
		chromedp.Text(`#groups tbody tr`, &groupRow), chromedp.Text(`#asof-time`, &asof1)))
	assert.Equal(t, "3", dead)
	assert.Equal(t, "3 of 3, oldest first", deadCount, "the table's count and the number on top, from one reading")
	assert.Equal(t, "2 of 2 ready", peekCount)
	assert.Equal(t, 3, deadRows, "each live row can be requeued")
	assert.Contains(t, groupRow, "acme")
	assert.NotEqual(t, asof0, asof1, "the time of the reading moves on")
	shoot(t, ctx, "dashboard-live.png")
}

// When the page cannot read any more (the server is gone), it says so and
// since when, rather than showing old numbers as current.
func TestQueuePageSaysWhenNotLive(t *testing.T) {
	ctx := browser(t)
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/q/"+url.PathEscape(q.Name())), chromedp.WaitVisible(`#ready`)))
	srv.CloseClientConnections()
	srv.Close()
	var asof string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.WaitVisible(`#asof.stale`),
		chromedp.Text(`#asof`, &asof)))
	assert.Regexp(t, `^as of \d\d:\d\d:\d\d: .* — not updating: `, asof)
}

// The charts' history: each reading of a queue is kept (at most one a
// second, for an hour), and a page opened later starts its charts with it.
func TestHistoryKeptAcrossPageLoads(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	api := "/api/queue/" + url.PathEscape(q.Name())
	for i := range 3 {
		_, err := q.Enqueue(context.Background(), []byte("x"))
		require.NoError(t, err)
		code, _, _ := req(t, srv, "GET", api, nil, nil)
		require.Equal(t, 200, code)
		code, _, _ = req(t, srv, "GET", api, nil, nil) // within the second: not kept
		require.Equal(t, 200, code)
		if i < 2 {
			time.Sleep(1100 * time.Millisecond)
		}
	}
	_, _, body := req(t, srv, "GET", api+"?history=1", nil, nil)
	var js struct {
		History []sample
	}
	require.NoError(t, json.Unmarshal([]byte(body), &js))
	var ready []int64
	for _, s := range js.History {
		ready = append(ready, s.Ready)
	}
	assert.Equal(t, []int64{1, 2, 3}, ready)
	assert.Equal(t, []int64{1, 2, 3}, []int64{js.History[0].Enqueued, js.History[1].Enqueued, js.History[2].Enqueued})
}

// A group held at its rate limit keeps its messages out of the lanes:
// prioq's Stats said ready 3, every lane 0 and oldest ready 0s, and the page
// said "unknown (in groups)". Stats now reads the parked group's list: the
// page shows the age of its oldest message, and how many wait outside the
// lanes.
func TestOldestReadyInGroupsNotShownAsZero(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	ctx := context.Background()
	for range 4 {
		_, err := q.Enqueue(ctx, []byte("x"), prioq.Group("zeta"))
		require.NoError(t, err)
	}
	require.NoError(t, q.SetGroupLimit(ctx, "zeta", prioq.GroupLimit{Rate: prioq.Rate{N: 1, Per: time.Hour}}))
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cons.Close(ctx)
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Ack(ctx))
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cons.Receive(short) // parks zeta at its rate
	cancel()
	require.Error(t, err)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Ready)
	require.Equal(t, []int64{0, 0}, st.Lanes)
	require.GreaterOrEqual(t, st.OldestReady, 300*time.Millisecond, "the parked group's oldest message")
	require.Equal(t, int64(1), st.GroupsParked)

	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	_, _, body := req(t, srv, "GET", "/q/"+url.PathEscape(q.Name()), nil, nil)
	assert.Regexp(t, `<span id="oldest">[0-9.]+(ms|s)</span>`, body)
	assert.NotContains(t, body, `<span id="oldest">0s</span>`)
	assert.Contains(t, body, `<span id="outside-lanes">3</span> ready message(s) are not in the lanes`)
	_, _, body = req(t, srv, "GET", "/api/queue/"+url.PathEscape(q.Name()), nil, nil)
	assert.NotContains(t, body, `"oldest":"unknown (in groups)"`)
	assert.NotContains(t, body, `"oldest":"0s"`)
}

// A dashboard started now draws the last hour from the queue's history kept
// in Redis (written a minute at a time by consumers and dashboards), before
// its own readings.
func TestChartsStartFromTheHistoryInRedis(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	ctx := context.Background()
	// Two minutes recorded earlier by another process (the member's form:
	// "t|ready|delayed|in flight|dead|enqueued|acked|retried|dead lettered").
	key := "prioq:{" + q.Name() + "}:hist"
	for i, ready := range []int64{7, 5} {
		at := time.Now().Truncate(time.Minute).Add(time.Duration(i-3) * time.Minute).UnixMilli()
		member := fmt.Sprintf("%d|%d|0|0|0|%d|%d|0|0", at, ready, 10+i, 3+i)
		require.NoError(t, client.Do(ctx, radix.Cmd(nil, "ZADD", key, fmt.Sprint(at), member)))
	}
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	h, err := New(Config{Client: client})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	_, _, body := req(t, srv, "GET", "/api/queue/"+url.PathEscape(q.Name())+"?history=1", nil, nil)
	var js struct {
		History []sample
	}
	require.NoError(t, json.Unmarshal([]byte(body), &js))
	var ready []int64
	for _, s := range js.History {
		ready = append(ready, s.Ready)
	}
	assert.Equal(t, []int64{7, 5, 1}, ready, "two minutes from Redis, then this process's reading")
	// This dashboard recorded its own minute too.
	stored, err := q.History(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Len(t, stored, 3)
	assert.Equal(t, int64(1), stored[2].Ready)
}

// The Schedules table is live: a schedule set after the page was loaded
// shows up with its spec, and its last fire time once a consumer fired it.
func TestQueuePageSchedulesLive(t *testing.T) {
	ctx := browser(t)
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	var rows string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/q/"+url.PathEscape(q.Name())),
		chromedp.WaitVisible(`#schedules`), chromedp.Text(`#schedules tbody`, &rows)))
	assert.Equal(t, "no schedule", rows)

	_, err = q.Schedule(context.Background(), "nightly", "0 3 * * *", []byte("x"))
	require.NoError(t, err)
	_, err = q.Schedule(context.Background(), "often", "@every 200ms", []byte("x"))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	require.NoError(t, err)
	defer cons.Close(context.Background())
	var first, second string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Poll(`document.querySelectorAll('#schedules tbody tr:not(.empty)').length === 2 && !document.querySelector('#schedules tbody tr:nth-child(2)').textContent.includes('never')`, nil,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text(`#schedules tbody tr:nth-child(1)`, &first), chromedp.Text(`#schedules tbody tr:nth-child(2)`, &second)))
	assert.Contains(t, first, "0 3 * * *")
	assert.Contains(t, first, "never")
	assert.Contains(t, second, "@every 200ms")
	assert.Contains(t, second, "ago")
}
