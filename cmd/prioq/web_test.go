package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/redisfind"
)

// ownRedis starts a Redis server of the test's own on port (0: a free
// one), so that the test may find it empty, stop it and start it again;
// it is stopped when the test ends. It returns its address and a function
// that stops it.
func ownRedis(t *testing.T, port int) (string, func()) {
	t.Helper()
	bin, err := exec.LookPath(redisfind.Binary())
	if err != nil {
		t.Skipf("skipping: no %s to start", redisfind.Binary())
	}
	if port == 0 {
		port, err = redisfind.FreePort()
		require.NoError(t, err)
	}
	a := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no", "--loglevel", "warning")
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Cleanup(stop)
	require.Eventually(t, func() bool { _, err := redisfind.Version(a); return err == nil }, 10*time.Second, 20*time.Millisecond)
	return a, stop
}

// webCmd starts prioq web with args and env, waits until it says where it
// listens, and returns that line; the process is stopped when the test
// ends.
func webCmd(t *testing.T, redis string, env []string, args ...string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--url", "redis://" + redis, "web"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr.String())
	return line, cmd
}

// get sends a request as a browser or a script would and returns the
// status and the body.
func get(t *testing.T, method, u string, header map[string]string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r, err := http.NewRequest(method, u, body)
	require.NoError(t, err)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		if k == "Host" {
			r.Host = v
		} else {
			r.Header.Set(k, v)
		}
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func paused(t *testing.T, q *prioq.Queue) bool {
	t.Helper()
	st, err := q.Stats(context.Background())
	require.NoError(t, err)
	return st.Paused
}

func freeAddr(t *testing.T, host string) (string, int) {
	port, err := redisfind.FreePort()
	require.NoError(t, err)
	return net.JoinHostPort(host, strconv.Itoa(port)), port
}

// Without credentials prioq web refuses to listen anywhere but on
// loopback, before it listens: nothing answers on the port.
func TestWebRefusesNonLoopbackWithoutCredentials(t *testing.T) {
	for _, host := range []string{"0.0.0.0", "", "::"} {
		a, port := freeAddr(t, host)
		out, errOut, code := prioqWithin(t, 10*time.Second, nil, "", "--url", "redis://"+addr, "web", "--addr", a)
		assert.Equal(t, 2, code, "%s: -1 if it served", a)
		assert.Contains(t, errOut, "refusing to listen on "+a+" without credentials", a)
		assert.Contains(t, errOut, "PRIOQ_WEB_TOKEN")
		assert.Empty(t, out, "no URL printed")
		_, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond)
		assert.Error(t, err, "nothing listens on %s", a)
	}
}

// With a token (from the environment), prioq web listens on every
// interface; requests without credentials or with wrong ones get 401,
// with the token (bearer, or as a browser's basic password) the pages,
// and actions through their confirmation; a foreign Host gets 421. The
// token is printed nowhere.
func TestWebWithCredentials(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	a, port := freeAddr(t, "0.0.0.0")
	const token = "t0ken-f0r-the-test"
	line, cmd := webCmd(t, addr, []string{"PRIOQ_WEB_TOKEN=" + token}, "--addr", a)
	assert.Contains(t, line, "credentials required")
	assert.NotContains(t, line, token)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	page := base + "/q/" + url.PathEscape(q.Name())
	basic := func(u, p string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) }
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {basic("ops", "wrong"), 401}, {"Bearer " + token, 200}, {basic("anyone", token), 200}} {
		code, body := get(t, "GET", page, map[string]string{"Authorization": tc.auth}, nil)
		assert.Equal(t, tc.want, code, tc.auth)
		assert.NotContains(t, body, token)
	}
	auth := map[string]string{"Authorization": "Bearer " + token}
	code, body := get(t, "GET", page, auth, nil)
	require.Equal(t, 200, code)
	assert.Contains(t, body, `id="pause-toggle"`, "actions with credentials")
	code, body = get(t, "GET", page+"/pause", auth, nil)
	require.Equal(t, 200, code)
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	require.NotNil(t, csrf)
	code, _ = get(t, "POST", page+"/pause", map[string]string{"Authorization": "Bearer " + token, "Origin": base},
		url.Values{"csrf": {csrf[1]}, "expect": {"0"}})
	assert.Equal(t, http.StatusSeeOther, code)
	assert.True(t, paused(t, q))

	code, _ = get(t, "GET", page, map[string]string{"Authorization": "Bearer " + token, "Host": "rebind.example:" + strconv.Itoa(port)}, nil)
	assert.Equal(t, http.StatusMisdirectedRequest, code, "a foreign Host, even with the token")

	_ = cmd.Process.Signal(os.Interrupt)
	require.NoError(t, cmd.Wait(), "Ctrl-C stops it cleanly")

	// Basic auth from the environment, on loopback.
	a, port = freeAddr(t, "127.0.0.1")
	webCmd(t, addr, []string{"PRIOQ_WEB_BASIC_AUTH=ops:pa55"}, "--addr", a)
	code, _ = get(t, "GET", fmt.Sprintf("http://%s/", a), nil, nil)
	assert.Equal(t, 401, code)
	code, _ = get(t, "GET", fmt.Sprintf("http://%s/", a), map[string]string{"Authorization": basic("ops", "pa55")}, nil)
	assert.Equal(t, 200, code)
	_, errOut, code := prioqRun(t, []string{"PRIOQ_WEB_BASIC_AUTH=nocolon"}, "", "--url", "redis://"+addr, "web", "--addr", "127.0.0.1:0")
	assert.Equal(t, 2, code)
	assert.NotContains(t, errOut, "nocolon", "the secret is not repeated")
}

// Without credentials, on loopback, the dashboard is read-only: pages
// read, no action is offered, a pause posted with everything else right is
// refused.
func TestWebReadOnlyWithoutCredentials(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	a, _ := freeAddr(t, "127.0.0.1")
	line, _ := webCmd(t, addr, nil, "--addr", a)
	assert.Contains(t, line, "read-only: no credentials")
	page := "http://" + a + "/q/" + url.PathEscape(q.Name())
	code, body := get(t, "GET", page, nil, nil)
	require.Equal(t, 200, code)
	assert.Contains(t, body, `id="readonly"`)
	assert.NotContains(t, body, `id="pause-toggle"`)
	code, _ = get(t, "POST", page+"/pause", map[string]string{"Origin": "http://" + a}, url.Values{"expect": {"0"}})
	assert.Equal(t, 403, code)
	assert.False(t, paused(t, q))
}

// An address it cannot have is an error, said once, without a URL printed
// first.
func TestWebBindFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	out, errOut, code := prioqCmd(t, "", "web", "--addr", l.Addr().String())
	assert.Equal(t, 2, code)
	assert.Equal(t, "prioq: web: cannot listen on "+l.Addr().String()+": bind: address already in use\n", errOut)
	assert.Empty(t, out, "no URL printed before the failure")
}

// prioq web starts on a Redis with no queue, and shows queues as they are
// created: in the list, and each one's page.
func TestWebStartsWithNoQueues(t *testing.T) {
	redis, _ := ownRedis(t, 0)
	a, _ := freeAddr(t, "127.0.0.1")
	line, _ := webCmd(t, redis, nil, "--addr", a)
	assert.Contains(t, line, "dashboard of every queue on http://"+a+"/")
	code, body := get(t, "GET", "http://"+a+"/", nil, nil)
	require.Equal(t, 200, code)
	assert.Contains(t, body, "no queues yet")

	for _, name := range []string{"orders", "team/alpha"} {
		_, errOut, code := prioqRun(t, nil, "", "--url", "redis://"+redis, "create", name)
		require.Equal(t, 0, code, errOut)
		code, body = get(t, "GET", "http://"+a+"/q/"+url.PathEscape(name), nil, nil)
		assert.Equal(t, 200, code, "%s's page at once", name)
	}
	require.Eventually(t, func() bool {
		_, body = get(t, "GET", "http://"+a+"/", nil, nil)
		return strings.Contains(body, `href="q/orders"`) && strings.Contains(body, `href="q/team%2Falpha"`)
	}, 5*time.Second, 100*time.Millisecond, "both in the list")
}
