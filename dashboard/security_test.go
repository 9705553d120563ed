package dashboard

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// req sends a request to srv as a browser or an attacker would, with the
// headers given ("Host" sets the Host header), and returns the status, the
// headers and the body.
func req(t *testing.T, srv *httptest.Server, method, path string, form url.Values, header map[string]string) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r, err := http.NewRequest(method, srv.URL+path, body)
	require.NoError(t, err)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrfOf reads the CSRF token from an action's confirmation page, as the
// page's own form would send it.
func csrfOf(t *testing.T, srv *httptest.Server, path string, header map[string]string) string {
	t.Helper()
	code, _, body := req(t, srv, "GET", path, nil, header)
	require.Equal(t, 200, code, body)
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	return m[1]
}

func paused(t *testing.T, q *prioq.Queue) bool {
	st, err := q.Stats(context.Background())
	require.NoError(t, err)
	return st.Paused
}

// A DNS rebinding: a name the attacker controls resolves to the
// dashboard's address, so the browser sends the attacker's Host (and, on a
// POST, Origin) to it. Every request so named is answered 421: the page
// (and its CSRF token) is not read, the pause is not done. The address the
// server listens on and localhost are served.
func TestForeignHostRefused(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	page := "/q/" + url.PathEscape(q.Name())
	csrf := csrfOf(t, srv, page+"/pause", nil)

	evil := "rebind.attacker.example:" + port
	code, _, body := req(t, srv, "GET", page, nil, map[string]string{"Host": evil})
	assert.Equal(t, http.StatusMisdirectedRequest, code)
	assert.NotContains(t, body, csrf, "no token for the attacker's page")
	code, _, _ = req(t, srv, "GET", "/api/queue/"+url.PathEscape(q.Name()), nil, map[string]string{"Host": evil})
	assert.Equal(t, http.StatusMisdirectedRequest, code, "no figures either")
	code, _, _ = req(t, srv, "POST", page+"/pause", url.Values{"csrf": {csrf}, "expect": {"0"}},
		map[string]string{"Host": evil, "Origin": "http://" + evil})
	assert.Equal(t, http.StatusMisdirectedRequest, code)
	assert.False(t, paused(t, q), "nothing changed")

	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST.:" + port} {
		code, _, _ = req(t, srv, "GET", page, nil, map[string]string{"Host": host})
		assert.Equal(t, 200, code, host)
	}

	// A name declared in Config.Hosts is served (behind a proxy).
	named, err := New(Config{Client: client, Hosts: []string{"ops.example.com"}})
	require.NoError(t, err)
	nsrv := httptest.NewServer(named)
	defer nsrv.Close()
	code, _, _ = req(t, nsrv, "GET", page, nil, map[string]string{"Host": "ops.example.com"})
	assert.Equal(t, 200, code)
	code, _, _ = req(t, nsrv, "GET", page, nil, map[string]string{"Host": "evil.example.com"})
	assert.Equal(t, http.StatusMisdirectedRequest, code)
}

// The same rebinding in Chromium: the browser resolves rebind.test to the
// dashboard's loopback address and opens it by that name; it gets the 421
// page, not the queue.
func TestForeignHostRefusedInBrowser(t *testing.T) {
	ctx := browser(t, chromedp.Flag("host-resolver-rules", "MAP rebind.test 127.0.0.1"))
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	var text string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate("http://rebind.test:"+port+"/q/"+url.PathEscape(q.Name())),
		chromedp.Text(`body`, &text)))
	assert.Contains(t, text, `Host "rebind.test:`+port+`" is not one the dashboard is served under`)
	assert.NotContains(t, text, "Pause")
}

// Actions posted from another origin are refused, whatever they carry: a
// cross-site form (Sec-Fetch-Site, Origin), a Referer elsewhere, none of
// either, no token, a wrong token; and a POST that did not come through the
// confirmation is sent to it. None changes anything; the real thing does.
func TestCrossOriginActionRefused(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	path := "/q/" + url.PathEscape(q.Name()) + "/pause"
	csrf := csrfOf(t, srv, path, nil)
	self := srv.URL
	for _, tc := range []struct {
		name   string
		form   url.Values
		header map[string]string
		want   int
	}{
		{"cross-site form", url.Values{"csrf": {csrf}, "expect": {"0"}}, map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403},
		{"cross-origin, no fetch metadata", url.Values{"csrf": {csrf}, "expect": {"0"}}, map[string]string{"Origin": "http://evil.example"}, 403},
		{"referer elsewhere", url.Values{"csrf": {csrf}, "expect": {"0"}}, map[string]string{"Referer": "http://evil.example/x"}, 403},
		{"null origin, referer elsewhere", url.Values{"csrf": {csrf}, "expect": {"0"}}, map[string]string{"Origin": "null", "Referer": "http://evil.example/"}, 403},
		{"no origin, no referer", url.Values{"csrf": {csrf}, "expect": {"0"}}, nil, 403},
		{"no token", url.Values{"expect": {"0"}}, map[string]string{"Origin": self}, 403},
		{"wrong token", url.Values{"csrf": {strings.Repeat("0", 64)}, "expect": {"0"}}, map[string]string{"Origin": self}, 403},
		{"token in the query", url.Values{"expect": {"0"}}, map[string]string{"Origin": self}, 403},
		{"not confirmed", url.Values{"csrf": {csrf}}, map[string]string{"Origin": self}, http.StatusSeeOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := path
			if tc.name == "token in the query" {
				p += "?csrf=" + csrf
			}
			code, hd, body := req(t, srv, "POST", p, tc.form, tc.header)
			assert.Equal(t, tc.want, code, body)
			if code == http.StatusSeeOther {
				assert.Equal(t, "pause", hd.Get("Location"), "to the confirmation")
			}
			assert.False(t, paused(t, q), "nothing changed")
		})
	}
	code, hd, _ := req(t, srv, "POST", path, url.Values{"csrf": {csrf}, "expect": {"0"}}, map[string]string{"Origin": self, "Sec-Fetch-Site": "same-origin"})
	assert.Equal(t, http.StatusSeeOther, code)
	assert.True(t, strings.HasPrefix(hd.Get("Location"), "../"+url.PathEscape(q.Name())+"?done=pause"), hd.Get("Location"))
	assert.True(t, paused(t, q), "the real thing")
	code, _, _ = req(t, srv, "POST", path, url.Values{"csrf": {csrf}, "expect": {"0"}}, map[string]string{"Referer": self + "/q/x/pause"})
	assert.Equal(t, http.StatusSeeOther, code, "a Referer of its own when Origin is missing")
}

// The cross-site POST from a real page elsewhere, in Chromium: the
// attacker's page holds a form aimed at the dashboard's pause, even with
// the right token and count; submitting it changes nothing.
func TestCrossOriginActionRefusedInBrowser(t *testing.T) {
	ctx := browser(t)
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	action := srv.URL + "/q/" + url.PathEscape(q.Name()) + "/pause"
	csrf := csrfOf(t, srv, "/q/"+url.PathEscape(q.Name())+"/pause", nil)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s"><input name="csrf" value="%s"><input name="expect" value="0"><button id="go">win a prize</button></form>`, action, csrf)
	}))
	defer evil.Close()
	var text string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)))) // another origin
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#go`)))
	require.Eventually(t, func() bool { // the browser follows the form to the dashboard
		var loc string
		return chromedp.Run(ctx, chromedp.Location(&loc), chromedp.Text(`body`, &text)) == nil && strings.HasPrefix(loc, srv.URL)
	}, 10*time.Second, 100*time.Millisecond)
	assert.Contains(t, text, "cross-origin request detected")
	assert.False(t, paused(t, q), "nothing changed")
}

// No page can be framed: every answer (pages, confirmations, JSON, assets,
// errors) carries frame-ancestors 'none' and X-Frame-Options DENY, and a
// request a browser makes for a frame is refused.
func TestFramedPageRefused(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	name := url.PathEscape(q.Name())
	for _, p := range []string{"/", "/q/" + name, "/q/" + name + "/purge", "/q/" + name + "/message?id=x", "/api/queue/" + name, "/api/queues",
		"/static/app.js", "/q/no-such-queue-anywhere", "/nothing-here"} {
		_, hd, _ := req(t, srv, "GET", p, nil, nil)
		assert.Contains(t, hd.Get("Content-Security-Policy"), "frame-ancestors 'none'", p)
		assert.NotContains(t, hd.Get("Content-Security-Policy"), "unsafe-inline", p)
		assert.Equal(t, "DENY", hd.Get("X-Frame-Options"), p)
		assert.Equal(t, "nosniff", hd.Get("X-Content-Type-Options"), p)
	}
	code, _, body := req(t, srv, "GET", "/q/"+name, nil, map[string]string{"Sec-Fetch-Dest": "iframe", "Sec-Fetch-Site": "cross-site"})
	assert.Equal(t, 403, code)
	assert.NotContains(t, body, q.Name())
}

// The framing in Chromium: a page elsewhere frames the dashboard; the
// browser asks for it as a frame, and the dashboard refuses to be one.
func TestFramedPageRefusedInBrowser(t *testing.T) {
	ctx := browser(t)
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	h, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	var mu sync.Mutex
	framed := map[int]int{} // status -> requests made for a frame
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: 200}
		h.ServeHTTP(rec, r)
		if r.Header.Get("Sec-Fetch-Dest") == "iframe" {
			mu.Lock()
			framed[rec.code]++
			mu.Unlock()
		}
	}))
	defer srv.Close()
	target := srv.URL + "/q/" + url.PathEscape(q.Name())
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><p>look</p><iframe id="f" src="%s" width="800" height="600"></iframe>`, target)
	}))
	defer evil.Close()
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)),
		chromedp.WaitReady(`#f`), chromedp.Sleep(500*time.Millisecond)))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[int]int{403: 1}, framed, "the frame was asked for and refused")
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) { s.code = code; s.ResponseWriter.WriteHeader(code) }

// Credentials as the Authorize hook: no credentials and wrong ones are
// answered 401 with a Basic challenge (a browser asks), on pages, JSON,
// assets and actions alike; the token as a bearer or as a basic password,
// and the user and password, are let in.
func TestCredentials(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	creds := Credentials{Token: "s3cret-token", User: "ops", Password: "pa55word"}
	h, err := New(Config{Client: client, Authorize: creds.Authorize})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	basic := func(u, p string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) }
	page := "/q/" + url.PathEscape(q.Name())
	for _, tc := range []struct {
		name string
		auth string
		want int
	}{
		{"none", "", 401},
		{"wrong bearer", "Bearer nope", 401},
		{"wrong password", basic("ops", "nope"), 401},
		{"wrong user", basic("root", "pa55word"), 401},
		{"token as a user name", basic("s3cret-token", ""), 401},
		{"bearer", "Bearer s3cret-token", 200},
		{"basic", basic("ops", "pa55word"), 200},
		{"token as the basic password", basic("anyone", "s3cret-token"), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []string{"/", page, "/api/queue/" + url.PathEscape(q.Name()), "/static/app.js", page + "/pause"} {
				code, hd, body := req(t, srv, "GET", p, nil, map[string]string{"Authorization": tc.auth})
				assert.Equal(t, tc.want, code, p)
				if tc.want == 401 {
					assert.Equal(t, `Basic realm="prioq dashboard", charset="UTF-8"`, hd.Get("WWW-Authenticate"), p)
					assert.NotContains(t, body, "s3cret", p)
				}
			}
			if tc.want == 401 {
				code, _, _ := req(t, srv, "POST", page+"/pause", url.Values{"csrf": {"x"}, "expect": {"0"}},
					map[string]string{"Authorization": tc.auth, "Origin": srv.URL})
				assert.Equal(t, 401, code)
			}
		})
	}
	assert.False(t, paused(t, q))
	var none Credentials
	assert.ErrorIs(t, none.Authorize(httptest.NewRequest("GET", "/", nil), View, ""), ErrUnauthenticated, "no secret: nobody")
}

// The same in Chromium: the browser meets the Basic challenge and asks its
// user; one who cancels sees the 401 and nothing of the queue, one who
// types the user and password gets the pages, whose script polls the live
// figures with them.
func TestCredentialsInBrowser(t *testing.T) {
	ctx := browser(t)
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	creds := Credentials{User: "ops", Password: "pa55word"}
	h, err := New(Config{Client: client, Authorize: creds.Authorize})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	var typed atomic.Bool // what the user does when asked: cancel, or type the credentials
	var asked atomic.Int64
	chromedp.ListenTarget(ctx, func(ev any) {
		switch e := ev.(type) {
		case *fetch.EventRequestPaused:
			go func() { _ = chromedp.Run(ctx, fetch.ContinueRequest(e.RequestID)) }()
		case *fetch.EventAuthRequired:
			asked.Add(1)
			answer := &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}
			if typed.Load() {
				answer = &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials,
					Username: "ops", Password: "pa55word"}
			}
			go func() { _ = chromedp.Run(ctx, fetch.ContinueWithAuth(e.RequestID, answer)) }()
		}
	})
	page := srv.URL + "/q/" + url.PathEscape(q.Name())
	var text string
	require.NoError(t, chromedp.Run(ctx, fetch.Enable().WithHandleAuthRequests(true),
		chromedp.Navigate(page), chromedp.Text(`body`, &text)))
	assert.Equal(t, int64(1), asked.Load(), "the browser was challenged")
	assert.Contains(t, text, "authentication required")
	assert.NotContains(t, text, q.Name())

	typed.Store(true)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(page), chromedp.WaitVisible(`#ready`)))
	_, err = q.Enqueue(context.Background(), []byte("x"))
	require.NoError(t, err)
	require.NoError(t, chromedp.Run(ctx, chromedp.Poll(`document.getElementById('ready').textContent === '1'`, nil,
		chromedp.WithPollingTimeout(10*time.Second))), "the script polls with the credentials")
}

// Without Authorize the dashboard is read-only: pages read, no action is
// offered, and every action (its confirmation too) is refused even with
// the token, origin and count; ReadOnly refuses them whatever Authorize
// says. A hook may allow some actions only, per queue.
func TestReadOnlyByDefaultAndPerAction(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2), MaxAttempts: 1})
	other := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	full, err := New(Config{Client: client, Authorize: allowAll})
	require.NoError(t, err)
	fsrv := httptest.NewServer(full)
	defer fsrv.Close()
	name := url.PathEscape(q.Name())
	csrf := csrfOf(t, fsrv, "/q/"+name+"/pause", nil) // a token the attacker somehow has

	plain, err := New(Config{Client: client})
	require.NoError(t, err)
	ro, err := New(Config{Client: client, Authorize: allowAll, ReadOnly: true})
	require.NoError(t, err)
	for label, h := range map[string]http.Handler{"no Authorize": plain, "ReadOnly": ro} {
		srv := httptest.NewServer(h)
		code, _, body := req(t, srv, "GET", "/q/"+name, nil, nil)
		assert.Equal(t, 200, code, label)
		assert.NotContains(t, body, `class="button`, "%s: no action offered", label)
		assert.Contains(t, body, `id="readonly"`, label)
		for _, a := range actions {
			code, _, _ = req(t, srv, "GET", "/q/"+name+"/"+string(a), nil, nil)
			assert.Equal(t, 403, code, "%s: %s confirmation", label, a)
			code, _, _ = req(t, srv, "POST", "/q/"+name+"/"+string(a), url.Values{"csrf": {csrf}, "expect": {"0"}, "id": {"x"}},
				map[string]string{"Origin": srv.URL})
			assert.Equal(t, 403, code, "%s: %s", label, a)
		}
		srv.Close()
	}
	assert.False(t, paused(t, q))

	// Operators may pause and resume "q" only; nobody may delete anything.
	per, err := New(Config{Client: client, Authorize: func(r *http.Request, a Action, queue string) error {
		if a == View || ((a == Pause || a == Resume) && queue == q.Name()) {
			return nil
		}
		return fmt.Errorf("%w: %s on %s is not yours", ErrForbidden, a, queue)
	}})
	require.NoError(t, err)
	srv := httptest.NewServer(per)
	defer srv.Close()
	csrf = csrfOf(t, srv, "/q/"+name+"/pause", nil)
	_, _, body := req(t, srv, "GET", "/q/"+name, nil, nil)
	assert.Contains(t, body, `id="pause-toggle"`)
	assert.NotContains(t, body, `id="purge"`)
	_, _, body = req(t, srv, "GET", "/q/"+url.PathEscape(other.Name()), nil, nil)
	assert.NotContains(t, body, `id="pause-toggle"`, "not on another queue")
	code, _, body := req(t, srv, "POST", "/q/"+name+"/purge", url.Values{"csrf": {csrf}, "expect": {"0"}}, map[string]string{"Origin": srv.URL})
	assert.Equal(t, 403, code)
	assert.Contains(t, body, "purge on "+q.Name()+" is not yours")
	code, _, _ = req(t, srv, "POST", "/q/"+name+"/pause", url.Values{"csrf": {csrf}, "expect": {"0"}}, map[string]string{"Origin": srv.URL})
	assert.Equal(t, http.StatusSeeOther, code)
	assert.True(t, paused(t, q))
}
