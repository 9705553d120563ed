package main

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// output collects what a running command writes, for a test to wait on.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output holds s count times.
func (o *output) waitFor(t *testing.T, s string, count int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Count(o.String(), s) >= count }, within, 20*time.Millisecond,
		"waiting for %d × %q in:\n%s", count, s, o)
}

// On a terminal, stats --watch redraws its block in place (cursor home,
// clear) with the time of the reading; into a pipe it writes plain blocks
// one after another, no control characters.
func TestWatchRedrawsOnATerminal(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	pty, tty, err := openPTY()
	if err != nil {
		t.Skip(err)
	}
	defer pty.Close()
	cmd := exec.Command(bin, "--url", "redis://"+addr, "stats", q.Name(), "--watch", "100ms")
	cmd.Stdout = tty
	require.NoError(t, cmd.Start())
	tty.Close()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var term output
	go func() { _, _ = io.Copy(&term, pty) }()
	term.waitFor(t, clearScreen, 3, 10*time.Second)
	assert.Regexp(t, `as of \d\d:\d\d:\d\d, every 100ms \(Ctrl-C stops\)`, term.String())
	for _, block := range strings.Split(term.String(), clearScreen)[1:] {
		assert.Equal(t, 1, strings.Count(block, "queue "), "one block a screen: %q", block)
	}

	var plain output
	pipe := exec.Command(bin, "--url", "redis://"+addr, "stats", q.Name(), "--watch", "100ms")
	pipe.Stdout = &plain
	require.NoError(t, pipe.Start())
	defer func() { _ = pipe.Process.Kill(); _ = pipe.Wait() }()
	plain.waitFor(t, "\nqueue ", 2, 10*time.Second)
	assert.NotContains(t, plain.String(), "\x1b", "no control characters into a pipe")
	assert.Contains(t, plain.String(), "\n\nqueue ", "a blank line between blocks")
}

// readyThree is the line "ready 3", whatever the width of the labels.
var readyThree = regexp.MustCompile(`\nready +3\n`)

// When Redis goes away, stats --watch says it cannot read and keeps
// trying; when Redis is back it reads again, in the same process.
func TestWatchSurvivesRedisRestart(t *testing.T) {
	redis, stop := ownRedis(t, 0)
	port := redis[strings.LastIndex(redis, ":")+1:]
	url := "redis://" + redis
	_, errOut, code := prioqRun(t, nil, "", "--url", url, "create", "orders")
	require.Equal(t, 0, code, errOut)
	_, _, code = prioqRun(t, nil, "", "--url", url, "enqueue", "orders", "x")
	require.Equal(t, 0, code)

	var out output
	cmd := exec.Command(bin, "--url", url, "stats", "orders", "--watch", "200ms")
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	out.waitFor(t, "\nready ", 1, 10*time.Second)

	stop()
	out.waitFor(t, "orders: cannot read it at", 1, 20*time.Second)
	assert.Contains(t, out.String(), "retrying every 200ms")
	select {
	case err := <-exited:
		t.Fatalf("exited when Redis went away: %v\n%s", err, out.String())
	default:
	}

	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	ownRedis(t, p) // back, empty: create the queue again
	_, errOut, code = prioqRun(t, nil, "", "--url", url, "create", "orders")
	require.Equal(t, 0, code, errOut)
	for range 3 {
		_, _, code = prioqRun(t, nil, "", "--url", url, "enqueue", "orders", "x")
		require.Equal(t, 0, code)
	}
	start := time.Now()
	require.Eventually(t, func() bool {
		s := out.String()
		return readyThree.MatchString(s[strings.LastIndex(s, "cannot read it"):])
	}, 20*time.Second, 50*time.Millisecond, "reads again once Redis is back:\n%s", &out)
	t.Logf("read again %v after Redis was back", time.Since(start))
	select {
	case err := <-exited:
		t.Fatalf("exited: %v", err)
	default:
	}
}

// A window of 0 or less, or below prioq.MinDuration, and rates over such a
// window, are refused with what the least is; nothing is changed.
func TestRefusesWindowsAndRatesBelowMinDuration(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	for _, args := range [][]string{
		{"queues", "--window", "0s"}, {"queues", "--window", "-1s"}, {"queues", "--window", "5ms"},
		{"stats", q.Name(), "--watch", "5ms"}, {"stats", q.Name(), "--watch", "-1s"},
		{"rate", q.Name(), "1/5ms"}, {"rate", q.Name(), "100/1ms"},
		{"limit", q.Name(), "acme", "1", "--rate", "1/1ms"},
	} {
		out, errOut, code := prioqWithin(t, 10*time.Second, nil, "", append([]string{"--url", "redis://" + addr}, args...)...)
		assert.Equal(t, 2, code, "%v: %s (-1: still running)", args, errOut)
		assert.Contains(t, errOut, "10ms", "%v says the least", args)
		assert.Empty(t, out, "%v", args)
	}
	r, err := q.RateLimit(context.Background())
	require.NoError(t, err)
	assert.Zero(t, r.N, "no rate limit was set")
}
