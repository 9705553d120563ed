package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/redisfind"
	"github.com/prioq/prioq/internal/testkit"
	"github.com/prioq/prioq/internal/testkit/testq"
)

var (
	bin    string // the built command
	addr   string
	client radix.Client
)

// The tests run the built binary, as a user or a script would, against a
// real Redis, and check its output, its exit code and the state in Redis.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "prioq-cmd-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "prioq")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
			return 1
		}
		return testkit.RunWithRedis(m, 4, func(a string, c radix.Client) { addr, client = a, c })
	}())
}

// prioqCmd runs the binary with stdin and returns stdout, stderr and the exit code.
func prioqCmd(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return prioqRun(t, nil, stdin, append([]string{"--url", "redis://" + addr}, args...)...)
}

// prioqRun runs the binary with the environment variables env added and
// exactly args (no --url), for at most two minutes.
func prioqRun(t *testing.T, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return prioqWithin(t, 2*time.Minute, env, stdin, args...)
}

// prioqWithin is prioqRun for a command expected to end within d: one
// still running then is stopped, and its exit code is -1.
func prioqWithin(t *testing.T, d time.Duration, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ctx.Err() != nil {
		code = -1
	} else if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

func newQueue(t *testing.T, cfg prioq.Config) *prioq.Queue { return testq.Open(t, client, cfg) }

func TestEnqueueStatsPeekCancel(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(3)})
	out, errOut, code := prioqCmd(t, "", "enqueue", q.Name(), "--priority", "2", "--id", "job-1", "--header", "tenant=acme", "hello")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "job-1\n", out)
	out, _, code = prioqCmd(t, "from stdin", "enqueue", q.Name(), "--priority", "0", "-")
	require.Equal(t, 0, code)
	stdinID := strings.TrimSpace(out)
	_, _, code = prioqCmd(t, "", "enqueue", q.Name(), "--delay", "1h", "later")
	require.Equal(t, 0, code)

	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 0, 1}, st.Lanes)
	assert.Equal(t, int64(1), st.Delayed)
	peek, err := q.Peek(ctx, 10)
	require.NoError(t, err)
	require.Len(t, peek, 2)
	assert.Equal(t, "acme", peek[0].Headers["tenant"])
	assert.Equal(t, "from stdin", string(peek[1].Payload))

	out, _, code = prioqCmd(t, "", "stats", q.Name(), "--json")
	require.Equal(t, 0, code)
	var js map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &js))
	assert.Equal(t, []any{1.0, 0.0, 1.0}, js["lanes"])
	assert.Equal(t, 1.0, js["delayed"])
	assert.Equal(t, "levels:3", js["layout"])
	out, _, code = prioqCmd(t, "", "stats", q.Name())
	require.Equal(t, 0, code)
	assert.Contains(t, out, "lane 2")
	assert.Contains(t, out, "delayed")

	out, _, code = prioqCmd(t, "", "peek", q.Name(), "-n", "5")
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	assert.True(t, strings.HasPrefix(lines[1], "job-1 "), "highest priority first: %q", lines[1])
	assert.Contains(t, lines[1], "(5 bytes)", "payloads hidden by default")
	out, _, _ = prioqCmd(t, "", "peek", q.Name(), "--payload")
	assert.Contains(t, out, `"hello"`)

	out, _, code = prioqCmd(t, "", "cancel", q.Name(), stdinID)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "cancelled")
	_, errOut, code = prioqCmd(t, "", "cancel", q.Name(), stdinID)
	assert.Equal(t, 1, code, "cancelling it again finds nothing")
	assert.Contains(t, errOut, "not found")
	n, err := q.Len(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)

	out, _, code = prioqCmd(t, "", "queues", "--no-rates")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "\n"+q.Name()+" ")
}

// A queue can be created from the shell (before, only a Go program calling
// Open could: `prioq enqueue` answered "no queue").
func TestCreate(t *testing.T) {
	name := testkit.QueueName(t)
	_, errOut, code := prioqCmd(t, "", "enqueue", name, "x")
	require.Equal(t, 2, code)
	assert.Contains(t, errOut, "no queue")

	out, errOut, code := prioqCmd(t, "", "create", name, "--layout", "range:0:1000:4", "--shards", "2")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "created "+name+" (range:0:1000:4, at-least-once, 2 shard(s))\n", out)
	out, _, code = prioqCmd(t, "", "enqueue", name, "--priority", "900", "x")
	require.Equal(t, 0, code)
	q, err := prioq.OpenExisting(context.Background(), client, name, prioq.Config{})
	require.NoError(t, err)
	assert.Equal(t, 2, q.Shards())
	peek, err := q.Peek(context.Background(), 1)
	require.NoError(t, err)
	require.Len(t, peek, 1)
	assert.Equal(t, strings.TrimSpace(out), peek[0].ID)

	out, _, code = prioqCmd(t, "", "create", name, "--layout", "range:0:1000:4", "--shards", "2")
	require.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(out, "exists "), out)
	_, errOut, code = prioqCmd(t, "", "create", name, "--layout", "levels:3")
	assert.Equal(t, 2, code, "another layout")
	assert.Contains(t, errOut, "different configuration")
	for _, args := range [][]string{
		{"create"}, {"create", name + "-b", "--layout", "levels:0"}, {"create", name + "-b", "--layout", "lanes:3"},
		{"create", name + "-b", "--mode", "sometimes"}, {"create", name + "-b", "--shards", "0"},
	} {
		_, _, code := prioqCmd(t, "", args...)
		assert.Equal(t, 2, code, "%v", args)
	}
	names, err := prioq.ListQueues(context.Background(), client, name+"-b")
	require.NoError(t, err)
	assert.Empty(t, names, "bad input creates nothing")
}

// prioq queues lists the queues matching a pattern with their figures,
// sorted as asked; rates are measured over --window.
func TestQueuesFiguresSortAndFilter(t *testing.T) {
	ctx := context.Background()
	base := testkit.QueueName(t)
	depth := []int{2, 5, 1}
	qs := make([]*prioq.Queue, len(depth))
	for i, d := range depth {
		q, err := prioq.Open(ctx, client, fmt.Sprintf("%s-%d", base, i), prioq.Config{})
		require.NoError(t, err)
		for range d {
			_, err := q.Enqueue(ctx, []byte("x"))
			require.NoError(t, err)
		}
		qs[i] = q
	}
	other := newQueue(t, prioq.Config{})
	out, errOut, code := prioqCmd(t, "", "queues", base+"-*", "--sort", "ready", "--no-rates", "--json")
	require.Equal(t, 0, code, errOut)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var row map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &row))
		got = append(got, fmt.Sprintf("%s=%v", row["queue"], row["ready"]))
		assert.GreaterOrEqual(t, row["oldest_ready_seconds"].(float64), 0.0)
	}
	assert.Equal(t, []string{qs[1].Name() + "=5", qs[0].Name() + "=2", qs[2].Name() + "=1"}, got)
	assert.NotContains(t, out, other.Name())

	// Written to until the command has measured: under load (CI runs
	// several packages at once) the command may start its window after a
	// fixed number of enqueues was over, and see no rate at all.
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = qs[2].Enqueue(ctx, []byte("y"))
			time.Sleep(20 * time.Millisecond)
		}
	}()
	out, _, code = prioqCmd(t, "", "queues", base+"-*", "--sort", "rate", "--window", "600ms")
	close(stop)
	<-done
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	assert.True(t, strings.HasPrefix(lines[1], qs[2].Name()+" "), "the queue being written to first: %s", out)
	_, _, code = prioqCmd(t, "", "queues", "--sort", "size")
	assert.Equal(t, 2, code)
}

func TestDeadLettersPauseAndPurge(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2), MaxAttempts: 1})
	_, err := q.Enqueue(ctx, []byte("secret"), prioq.ID("d-1"))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	require.NoError(t, err)
	defer cons.Close(ctx)
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Retry(ctx, 0, "card declined"))

	out, _, code := prioqCmd(t, "", "dead", q.Name(), "list")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "d-1")
	assert.Contains(t, out, `"card declined"`)
	assert.NotContains(t, out, "secret", "payloads hidden in lists")
	out, _, code = prioqCmd(t, "", "dead", q.Name(), "show", "d-1")
	require.Equal(t, 0, code)
	assert.Contains(t, out, `"secret"`)
	_, _, code = prioqCmd(t, "", "dead", q.Name(), "requeue", "d-1")
	require.Equal(t, 0, code)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.Dead)
	assert.Equal(t, int64(1), st.Ready)

	_, _, code = prioqCmd(t, "", "pause", q.Name())
	require.Equal(t, 0, code)
	st, _ = q.Stats(ctx)
	assert.True(t, st.Paused)
	_, _, code = prioqCmd(t, "", "resume", q.Name())
	require.Equal(t, 0, code)
	st, _ = q.Stats(ctx)
	assert.False(t, st.Paused)

	out, errOut, code := prioqCmd(t, "n\n", "purge", q.Name())
	assert.Equal(t, 1, code, "not confirmed")
	assert.Contains(t, out, "[y/N]")
	assert.Contains(t, errOut, "nothing deleted")
	st, _ = q.Stats(ctx)
	assert.Equal(t, int64(1), st.Ready)
	out, _, code = prioqCmd(t, "y\n", "purge", q.Name())
	require.Equal(t, 0, code)
	assert.Contains(t, out, "purged 1")
	_, err = q.Enqueue(ctx, []byte("x"), prioq.ID("p-2"))
	require.NoError(t, err)
	out, _, code = prioqCmd(t, "", "purge", q.Name(), "--yes")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "purged 1")
}

// Bad input is one line on stderr and exit 2, never a stack trace, and it
// changes nothing.
func TestBadInput(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(3)})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "usage"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"stats"}, "needs a queue"},
		{[]string{"stats", "no-such-queue-here"}, `no queue "no-such-queue-here"`},
		{[]string{"enqueue", q.Name(), "--priority", "7", "x"}, "priority"},
		{[]string{"enqueue", q.Name(), "--priority", "x", "x"}, "invalid value"},
		{[]string{"enqueue", q.Name(), "--id", "has space", "x"}, "id"},
		{[]string{"enqueue", q.Name(), "--header", "novalue", "x"}, "key=value"},
		{[]string{"--url", "redis://127.0.0.1:1", "stats", q.Name()}, "cannot reach Redis"},
		{[]string{"--url", "http://x", "stats", q.Name()}, "scheme"},
	} {
		_, errOut, code := prioqCmd(t, "", tc.args...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if tc.want != "usage" {
			assert.Len(t, lines, 1, "%v: one line: %q", tc.args, errOut)
		}
		assert.Contains(t, strings.ToLower(errOut), strings.ToLower(tc.want), "%v", tc.args)
		assert.NotContains(t, errOut, "goroutine", "no stack trace")
	}
	n, err := q.Len(context.Background())
	require.NoError(t, err)
	assert.Zero(t, n, "nothing was enqueued")
}

// prioq web serves the dashboard of the queues it finds.
func TestWeb(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	port, err := redisfind.FreePort()
	require.NoError(t, err)
	web := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "--url", "redis://"+addr, "web", "--addr", web, "--read-only", q.Name())
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + web + "/q/" + q.Name())
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200
	}, 10*time.Second, 50*time.Millisecond)
	assert.Contains(t, body, q.Name())
	assert.Contains(t, body, "levels:2")
	assert.NotContains(t, body, "<button", "--read-only")
}

// stats --watch --json prints a line per interval with the totals and, from
// the second line on, the rates over the interval.
func TestStatsWatchShowsRates(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	load, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for load.Err() == nil {
			_, _ = q.Enqueue(load, []byte("x"))
			time.Sleep(10 * time.Millisecond)
		}
	}()
	cmd := exec.CommandContext(ctx, bin, "--url", "redis://"+addr, "stats", q.Name(), "--json", "--watch", "300ms")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	var lines []map[string]any
	for len(lines) < 4 && sc.Scan() {
		var js map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &js))
		lines = append(lines, js)
	}
	require.Len(t, lines, 4)
	assert.NotContains(t, lines[0], "enqueued_per_second", "one sample has no rate")
	for _, js := range lines[1:] {
		rate, ok := js["enqueued_per_second"].(float64)
		require.True(t, ok, "%v", js)
		assert.Greater(t, rate, 0.0)
		assert.Equal(t, 0.0, js["acked_per_second"], "nothing consumes")
	}
	assert.Greater(t, lines[3]["enqueued_total"].(float64), lines[0]["enqueued_total"].(float64))
}

// A queue of several shards: stats shows each shard's figures, as a table
// and as JSON, and they add up to the totals; a queue of one shows none.
func TestStatsShowsShards(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(2), Shards: 3})
	for i := range 30 {
		_, errOut, code := prioqCmd(t, "", "enqueue", q.Name(), "--id", fmt.Sprintf("job-%d", i), "--priority", "1", "x")
		require.Equal(t, 0, code, errOut)
	}
	_, _, code := prioqCmd(t, "", "enqueue", q.Name(), "--delay", "1h", "later")
	require.Equal(t, 0, code)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, st.Shards, 3)
	assert.Equal(t, int64(30), st.Ready)

	out, _, code := prioqCmd(t, "", "stats", q.Name(), "--json")
	require.Equal(t, 0, code)
	var js struct {
		Ready, Delayed int64
		Shards         []struct {
			Shard, Slot    int
			Node           string
			Ready, Delayed int64
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &js))
	assert.Equal(t, int64(30), js.Ready)
	assert.Equal(t, int64(1), js.Delayed)
	require.Len(t, js.Shards, 3)
	var ready, delayed int64
	for i, s := range js.Shards {
		assert.Equal(t, i, s.Shard)
		assert.Equal(t, q.ShardSlots()[i], s.Slot)
		assert.Equal(t, "", s.Node, "not a cluster client: no node")
		assert.Equal(t, st.Shards[i].Ready, s.Ready)
		assert.Positive(t, s.Ready, "30 ids spread over 3 shards")
		ready, delayed = ready+s.Ready, delayed+s.Delayed
	}
	assert.Equal(t, int64(30), ready)
	assert.Equal(t, int64(1), delayed)

	out, _, code = prioqCmd(t, "", "stats", q.Name())
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^shard +slot +node +ready +delayed +in flight +dead$`, out)
	for i, s := range st.Shards {
		assert.Regexp(t, fmt.Sprintf(`(?m)^%d +%d +- +%d +%d +0 +0$`, i, s.Slot, s.Ready, s.Delayed), out)
	}

	one := newQueue(t, prioq.Config{Layout: prioq.Levels(2)})
	out, _, code = prioqCmd(t, "", "stats", one.Name(), "--json")
	require.Equal(t, 0, code)
	assert.NotContains(t, out, `"shards"`)
	out, _, code = prioqCmd(t, "", "stats", one.Name())
	require.Equal(t, 0, code)
	assert.NotContains(t, out, "shard")
}

// prioq queues over 10,000 real queues: every one listed with its figures.
func TestQueuesTenThousand(t *testing.T) {
	base := testkit.QueueName(t)
	names := testq.OpenMany(t, client, base, 10000, prioq.Config{Layout: prioq.Levels(1)})
	start := time.Now()
	out, errOut, code := prioqCmd(t, "", "queues", base+"-*", "--no-rates", "--sort", "name")
	require.Equal(t, 0, code, errOut)
	t.Logf("prioq queues over 10,000 queues: %v", time.Since(start))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 10001, "a header and one line per queue")
	assert.True(t, strings.HasPrefix(lines[1], names[0]+" "), lines[1])
	assert.True(t, strings.HasPrefix(lines[10000], names[9999]+" "), lines[10000])
	assert.NotContains(t, out, "error")
}

// Groups: enqueue --group, limit, and stats with the most loaded groups.
func TestGroupsEnqueueLimitStats(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(3)})
	for i := 0; i < 3; i++ {
		_, errOut, code := prioqCmd(t, "", "enqueue", q.Name(), "--group", "acme", fmt.Sprint(i))
		require.Equal(t, 0, code, errOut)
	}
	_, errOut, code := prioqCmd(t, "", "enqueue", q.Name(), "--group", "zeta", "z")
	require.Equal(t, 0, code, errOut)
	out, errOut, code := prioqCmd(t, "", "limit", q.Name(), "*", "2")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "limited to 2")
	_, _, code = prioqCmd(t, "", "limit", q.Name(), "acme", "x")
	assert.Equal(t, 2, code)
	_, errOut, code = prioqCmd(t, "", "enqueue", q.Name(), "--group", "a b", "x")
	assert.Equal(t, 2, code, "a bad group is bad input")
	assert.Contains(t, errOut, "group")

	out, _, code = prioqCmd(t, "", "stats", q.Name(), "--json")
	require.Equal(t, 0, code)
	var js map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &js))
	assert.Equal(t, 2.0, js["groups"])
	assert.Equal(t, 4.0, js["ready"])
	assert.Equal(t, []any{
		map[string]any{"group": "acme", "ready": 3.0, "in_flight": 0.0, "limit": 2.0, "rate": "none", "at_limit": false, "at_rate_limit": false},
		map[string]any{"group": "zeta", "ready": 1.0, "in_flight": 0.0, "limit": 2.0, "rate": "none", "at_limit": false, "at_rate_limit": false},
	}, js["top_groups"])
	out, _, code = prioqCmd(t, "", "stats", q.Name(), "--groups", "1")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "acme")
	assert.NotContains(t, out, "zeta", "only the most loaded group")
	gs, err := q.Groups(ctx, 0)
	require.NoError(t, err)
	require.Len(t, gs, 2)
}

// Rate limits: rate sets the queue's, limit --rate a group's; stats shows
// both; a rate that does not parse or that prioq refuses is bad input.
func TestRateLimits(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(3)})
	out, errOut, code := prioqCmd(t, "", "rate", q.Name(), "100/1s")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "rate limit 100/1s")
	out, errOut, code = prioqCmd(t, "", "limit", q.Name(), "acme", "0", "--rate", "5/200ms")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "limited to 5/200ms taken")
	for _, bad := range [][]string{{"rate", q.Name(), "100"}, {"rate", q.Name(), "x/1s"}, {"rate", q.Name(), "1/1us"},
		{"limit", q.Name(), "acme", "1", "--rate", "5"}, {"rate", q.Name(), "1000000/1s"}} {
		_, errOut, code = prioqCmd(t, "", bad...)
		assert.Equal(t, 2, code, "%v: %s", bad, errOut)
	}
	_, errOut, code = prioqCmd(t, "", "enqueue", q.Name(), "--group", "acme", "x")
	require.Equal(t, 0, code, errOut)
	out, _, code = prioqCmd(t, "", "stats", q.Name(), "--json")
	require.Equal(t, 0, code)
	var js map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &js))
	assert.Equal(t, "100/1s", js["rate_limit"])
	assert.Equal(t, []any{
		map[string]any{"group": "acme", "ready": 1.0, "in_flight": 0.0, "limit": 0.0, "rate": "5/200ms", "at_limit": false, "at_rate_limit": false},
	}, js["top_groups"])
	r, err := q.RateLimit(ctx)
	require.NoError(t, err)
	assert.Equal(t, prioq.Rate{N: 100, Per: time.Second}, r)
	_, errOut, code = prioqCmd(t, "", "rate", q.Name(), "none")
	require.Equal(t, 0, code, errOut)
	out, _, code = prioqCmd(t, "", "stats", q.Name())
	require.Equal(t, 0, code)
	assert.Contains(t, out, "rate limit")
	assert.Contains(t, out, "none")
}

func TestSchedules(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(3)})
	out, errOut, code := prioqCmd(t, "", "schedules", q.Name())
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "no schedule")
	out, errOut, code = prioqCmd(t, "", "schedule", "add", q.Name(), "nightly", "CRON_TZ=Europe/Paris 0 3 * * *", "report", "--priority", "2", "--missed", "skip")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "schedule nightly set, next fire 20")
	list, err := q.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, int64(2), list[0].Priority)
	assert.Equal(t, prioq.MissedSkip, list[0].Missed)
	out, errOut, code = prioqCmd(t, "", "schedules", q.Name(), "--payload")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "nightly  CRON_TZ=Europe/Paris 0 3 * * *")
	assert.Contains(t, out, "report")
	for _, bad := range [][]string{{"schedule", "add", q.Name(), "n", "* * *", "p"}, {"schedule", "add", q.Name(), "n", "@hourly", "p", "--missed", "x"},
		{"schedule", "add", q.Name(), "n", "@hourly", "p", "--priority", "7"}, {"schedule", "add", q.Name(), "n", "@hourly"}, {"schedule", q.Name(), "x"}} {
		_, errOut, code = prioqCmd(t, "", bad...)
		assert.Equal(t, 2, code, "%v: %s", bad, errOut)
	}
	out, errOut, code = prioqCmd(t, "", "schedule", "rm", q.Name(), "nightly")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "schedule nightly removed")
	_, _, code = prioqCmd(t, "", "schedule", "rm", q.Name(), "nightly")
	assert.Equal(t, 1, code, "not found")
	out, _, code = prioqCmd(t, "", "schedule", "--help")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "CRON_TZ")
}
