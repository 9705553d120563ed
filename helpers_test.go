package prioq

import (
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/redisfind"
	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit"
	"github.com/prioq/prioq/internal/testkit/require"
)

// One Redis for the whole package run; every test uses queues of its own.
var testAddr string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperProcess())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	srv, err := redisfind.Find(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "prioq tests need Redis:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "prioq tests: Redis from", srv.How)
	testAddr = srv.Addr
	os.Setenv("PRIOQ_REDIS_ADDR", srv.Addr) // for the examples and helper processes
	// One pool for all tests (testkit.Pool says why it waits for the fill).
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	sharedClient, err = testkit.Pool(ctx, testAddr, 64, radix.Dialer{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "prioq tests: pool:", err)
		os.Exit(1)
	}
	code := m.Run()
	sharedClient.Close()
	srv.Stop()
	os.Exit(code)
}

var sharedClient radix.Client

// newClient returns the package's shared pool (64 connections: enough for the
// blocking waits of every consumer a test runs at once).
func newClient(t testing.TB) radix.Client {
	t.Helper()
	return sharedClient
}

func queueName(t testing.TB) string { return testkit.QueueName(t) }

func openQueue(t testing.TB, c Client, cfg Config) *Queue {
	t.Helper()
	q, err := Open(context.Background(), c, queueName(t), cfg)
	require.NoError(t, err)
	return q
}

func newConsumer(t testing.TB, q *Queue, cfg ConsumerConfig) *Consumer {
	t.Helper()
	c, err := q.NewConsumer(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// existingKeys lists which of the queue's keys exist, meta aside.
func existingKeys(t testing.TB, q *Queue) []string {
	t.Helper()
	var out []string
	for _, k := range sh(q).Keys().All() {
		if k == sh(q).Keys().Meta() {
			continue
		}
		var n int
		require.NoError(t, sh(q).Client().Do(context.Background(), radix.Cmd(&n, "EXISTS", k)))
		if n == 1 {
			out = append(out, k)
		}
	}
	return out
}

var bothModes = []struct {
	name string
	mode Mode
}{{"AtLeastOnce", AtLeastOnce}, {"AtMostOnce", AtMostOnce}}

var someLayouts = []struct {
	name   string
	layout Layout
}{
	{"Levels5", Levels(5)},
	{"Levels12", Levels(12)}, // AtLeastOnce: a filled index (format 5)
	{"Range", Range(-1000, 1000, 7)},
	{"Range12", Range(-1000, 1000, 12)}, // a filled index (format 5)
	{"RangeSeq", seqRange(-1000, 1000, 7)},
}

// seqRange is RangeSorted, the form every Range queue had before storage
// format 4: Open writes format 2 (3 sharded) for it, as those versions did,
// and serves it the way they did; Open of a plain Range layout finds such a
// queue the same way (TestRangeQueuesOfFormat2KeepWorking).
func seqRange(lo, hi int64, segments int) Layout { return RangeSorted(lo, hi, segments) }

// threeLanes are a Levels and a Range layout of three lanes each, for tests
// that need the same lane count from both (priorities 0..2 fit both).
var threeLanes = []struct {
	name   string
	layout Layout
}{{"Levels3", Levels(3)}, {"Range", Range(0, 99, 3)}, {"RangeSeq", seqRange(0, 99, 3)}}

// newRand is a seeded generator whose seed is logged, to replay a failure.
func newRand(t testing.TB) *mrand.Rand {
	return mrand.New(mrand.NewPCG(testkit.Seed(t), 1))
}

// ownServer starts a server for one test, for tests that change
// server-wide settings (maxmemory, eviction policy): redis-server, or the
// one PRIOQ_SERVER names (redisfind.Binary), as the package's own. It needs
// the binary on PATH; without it the test skips, except under CI=true,
// where it fails.
func ownServer(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath(redisfind.Binary())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required under CI=true: %v", redisfind.Binary(), err)
		}
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := redisfind.StartBinary(ctx, bin, args...)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return srv.Addr
}

// ownPool is a pool on addr, filled before it is returned and closed when the
// test ends.
func ownPool(t *testing.T, addr string, size int) radix.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := testkit.Pool(ctx, addr, size, radix.Dialer{})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

// pureQueue is a Queue with no client, for tests of code that makes no Redis
// call: any call it tried would panic.
func pureQueue(cfg Config) *Queue {
	return newQueue(nil, "pure", cfg.withDefaults())
}

// clientFunc is a Client made of a function, for tests without Redis.
type clientFunc func(context.Context, radix.Action) error

func (f clientFunc) Do(ctx context.Context, a radix.Action) error { return f(ctx, a) }

// infoValue reads one field of an INFO section ("" when absent).
func infoValue(t testing.TB, c radix.Client, section, field string) string {
	t.Helper()
	var info string
	require.NoError(t, c.Do(context.Background(), radix.Cmd(&info, "INFO", section)))
	for _, line := range strings.Split(strings.ReplaceAll(info, "\r", ""), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

func infoInt(t testing.TB, c radix.Client, section, field string) int {
	t.Helper()
	n, err := strconv.Atoi(infoValue(t, c, section, field))
	require.NoError(t, err)
	return n
}

// commandCalls reads INFO commandstats: calls per command.
func commandCalls(t testing.TB, c radix.Client) map[string]int {
	t.Helper()
	var info string
	require.NoError(t, c.Do(context.Background(), radix.Cmd(&info, "INFO", "commandstats")))
	out := map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if ok {
			n, _ := strconv.Atoi(rest[:strings.Index(rest, ",")])
			out[name] = n
		}
	}
	return out
}

// scriptCalls is the script calls among calls (commandCalls): EVAL, EVALSHA,
// FCALL.
func scriptCalls(calls map[string]int) int { return calls["evalsha"] + calls["eval"] + calls["fcall"] }

// sh is the queue's shard, for tests that look at its keys or make its calls.
func sh(q *Queue) *store.Shard { return q.shards[0] }

// failTok runs fail.lua on the delivery of token (as a consumer's Retry or
// dead-lettering would) and returns its error only.
func failTok(s *store.Shard, ctx context.Context, token string, after time.Duration, reason, op string) error {
	_, err := s.Fail(ctx, token, after, reason, op)
	return err
}

// shardTake leases up to n ready messages of shard s from lanes, in their order,
// and returns them as a consumer would (paused: the queue is paused). One
// take.lua call, not merged with others.
func shardTake(s *store.Shard, ctx context.Context, lanes []string, n int, lease time.Duration) ([]*Message, bool, error) {
	r, err := s.Take(ctx, store.TakeArgs{Lanes: lanes, N: n, Lease: lease})
	return messagesOf(r.Deliveries), r.Paused, err
}

// takeArgs are a take's arguments as the tests give them (store.TakeArgs,
// with the floor as take.lua reads it: ” for none).
type takeArgs struct {
	lanes     []string
	n         int
	lease     time.Duration
	popLanes  int
	top       bool
	floor     string
	claimWake bool
	guess     bool
}

// takeReply is store.TakeReply with the root's messages.
type takeReply struct {
	msgs    []*Message
	paused  bool
	top     int64
	hasTop  bool
	dropped []error
	limited time.Duration
}

// takeFrom is store's Take of a on shard s.
func takeFrom(s *store.Shard, ctx context.Context, a takeArgs) (takeReply, error) {
	ta := store.TakeArgs{Lanes: a.lanes, N: a.n, Lease: a.lease, PopLanes: a.popLanes, Top: a.top,
		ClaimWake: a.claimWake, Guess: a.guess}
	if a.floor != "" {
		f, err := strconv.ParseInt(a.floor, 10, 64)
		if err != nil {
			panic("takeFrom: floor " + a.floor)
		}
		ta.Floor, ta.Floored = f, true
	}
	r, err := s.Take(ctx, ta)
	return takeReply{msgs: messagesOf(r.Deliveries), paused: r.Paused, top: r.Top, hasTop: r.HasTop,
		dropped: r.Dropped, limited: r.Limited}, err
}

// enqueueIDs enqueues one message per id, its payload the id.
func enqueueIDs(ctx context.Context, t *testing.T, q *Queue, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := q.Enqueue(ctx, []byte(id), ID(id))
		require.NoError(t, err)
	}
}

// errorLog returns an OnError that records what it is given, and a reader
// of the record.
func errorLog() (onError func(error), reported func() []string) {
	var mu sync.Mutex
	var errs []string
	return func(err error) {
			mu.Lock()
			errs = append(errs, err.Error())
			mu.Unlock()
		}, func() []string {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), errs...)
		}
}

// liveIDs lists the ids of the queue's ready messages, in serving order.
func liveIDs(t *testing.T, q *Queue) []string {
	t.Helper()
	peek, err := q.Peek(context.Background(), MaxBatch)
	require.NoError(t, err)
	var out []string
	for _, m := range peek {
		out = append(out, m.ID)
	}
	return out
}

// laneTop is the highest priority of lane i of a layout of threeLanes.
func laneTop(l Layout, i int) int64 {
	for p := l.l.Highest(); l.l.IsRange(); p-- {
		if lane, _ := l.l.LaneOf(p); lane == i {
			return p
		}
	}
	return int64(i)
}

// lockedBuffer is a bytes.Buffer for a logger written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// onlyDeadLetter is the queue's one dead letter (the test fails unless there
// is exactly one).
func onlyDeadLetter(t *testing.T, q *Queue) DeadLetter {
	t.Helper()
	dead, err := q.DeadLetters(context.Background(), 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	return dead[0]
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }
