package prioq

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Redis does not roll a script back: one that fails after its first write
// leaves that write behind. These tests put each key of a queue, one at a
// time, in the wrong type and run every operation against it: an operation
// either succeeds or fails leaving every key byte for byte as it was.

// fixture is a queue holding something in every state: ready messages in each
// lane (generated and caller ids), delayed ones (due and not yet due), one in
// flight with an expired lease, one in flight with a live lease, one dead.
type fixture struct {
	q              *Queue
	expired, live  *Message
	readyID, delID string
}

func newFixture(t *testing.T, layout Layout) *fixture {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: layout, MaxAttempts: 5})
	f := &fixture{q: q, readyID: "ready-id", delID: "delayed-id"}
	prio := func(lane int) Option {
		if layout.l.IsRange() {
			return Priority(layout.l.Lowest() + int64(lane)*(layout.l.Highest()-layout.l.Lowest())/int64(layout.l.Lanes()))
		}
		return Priority(int64(lane))
	}
	top := prio(layout.l.Lanes() - 1)
	// Two in flight: take them from the top lane before anything else is there.
	for _, id := range []string{"expired-id", "live-id"} {
		_, err := q.Enqueue(ctx, []byte(id), ID(id), top)
		require.NoError(t, err)
	}
	exp, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Millisecond)
	require.NoError(t, err)
	live, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Hour)
	require.NoError(t, err)
	require.Len(t, exp, 1)
	require.Len(t, live, 1)
	f.expired, f.live = exp[0], live[0]
	// One dead.
	_, err = q.Enqueue(ctx, []byte("dead"), ID("dead-id"), top)
	require.NoError(t, err)
	d, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Hour)
	require.NoError(t, err)
	require.NoError(t, failTok(sh(q), ctx, d[0].token(), 0, "died", "dead"))
	// Ready in every lane, delayed due and not due.
	for lane := 0; lane < layout.l.Lanes(); lane++ {
		_, err := q.Enqueue(ctx, []byte("r"), prio(lane))
		require.NoError(t, err)
	}
	_, err = q.Enqueue(ctx, []byte("ready"), ID(f.readyID), prio(0))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("due"), At(time.Now().Add(-time.Minute)), ID("due-id"), top)
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("later"), Delay(time.Hour), ID(f.delID))
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // the 1 ms lease has expired
	return f
}

// snapshot is every key of the queue, serialized by DUMP ("" when missing).
func snapshot(t *testing.T, q *Queue) map[string]string {
	t.Helper()
	out := map[string]string{}
	keys := sh(q).Keys().All()
	if sh(q).Lists() {
		// The priorities' lists: every one of the queue's (SCAN), since an
		// operation may write a list no index names. The package's tests
		// share one server with many keys: a large COUNT makes each SCAN a
		// few calls instead of thousands.
		var found []string
		s := (radix.ScannerConfig{Command: "SCAN", Pattern: sh(q).Keys().Prefix() + "prio:*", Count: 100000}).New(sh(q).Client().(radix.Client))
		var k string
		for s.Next(context.Background(), &k) {
			found = append(found, k)
		}
		require.NoError(t, s.Close())
		keys = append(keys, found...)
	}
	for _, k := range keys {
		var mb radix.Maybe
		var s string
		mb.Rcv = &s
		require.NoError(t, sh(q).Client().Do(context.Background(), radix.Cmd(&mb, "DUMP", k)))
		out[k] = s
	}
	return out
}

// corrupt replaces key with a value of another type.
func corrupt(t *testing.T, q *Queue, key string) {
	t.Helper()
	p := radix.NewPipeline()
	p.Append(radix.Cmd(nil, "DEL", key))
	if key == sh(q).Keys().Seq() {
		p.Append(radix.Cmd(nil, "RPUSH", key, "not a counter"))
	} else {
		p.Append(radix.Cmd(nil, "SET", key, "wrong type"))
	}
	require.NoError(t, sh(q).Client().Do(context.Background(), p))
}

type scriptOp struct {
	name string
	run  func(ctx context.Context, f *fixture) error
	// pipelined ops are not scripts: each command of a pipeline is judged
	// alone, so a wrong-typed key may fail one command while another one
	// succeeds. These list the keys whose corruption is allowed to leave the
	// other command's effect (see the comment at each).
	pipelinedKeys []string
}

func scriptOps(q *Queue) []scriptOp {
	batch := func(ctx context.Context, f *fixture, opts ...Option) error {
		items := []EnqueueItem{}
		for lane := 0; lane < f.q.layout().Lanes(); lane++ {
			p := int64(lane)
			if sh(f.q).IsRange() {
				p = f.q.layout().Lowest() + int64(lane)*(f.q.layout().Highest()-f.q.layout().Lowest())/int64(f.q.layout().Lanes())
			}
			items = append(items,
				EnqueueItem{Payload: []byte("b"), Options: append([]Option{Priority(p)}, opts...)},
				EnqueueItem{Payload: []byte("b"), Options: append([]Option{Priority(p), ID(fmt.Sprintf("b-%d", lane))}, opts...)})
		}
		_, err := f.q.EnqueueBatch(ctx, items)
		return err
	}
	var plain []string // Range queues of formats 2 and 3 always run a script
	if !sh(q).IsRange() || sh(q).Lists() {
		plain = append(plain, sh(q).Keys().Lanes()...)
	}
	return []scriptOp{
		{name: "open", run: func(ctx context.Context, f *fixture) error {
			_, err := Open(ctx, sh(f.q).Client(), f.q.name, f.q.cfg)
			return err
		}},
		// The plain enqueue is RPUSH + ZADD wake-up in one pipeline: with a
		// wrong-typed lane the wake-up marker may still be set (a hint that
		// costs an idle consumer one empty take).
		{name: "enqueue plain", run: func(ctx context.Context, f *fixture) error {
			_, err := f.q.Enqueue(ctx, []byte("x"))
			return err
		}, pipelinedKeys: plain},
		// grouped.lua (threeLanes are AtLeastOnce): checks before it writes.
		{name: "enqueue grouped", run: func(ctx context.Context, f *fixture) error {
			if sh(f.q).Config().Layout.SeqMembers() {
				return nil // (RangeSorted takes no groups)
			}
			_, err := f.q.Enqueue(ctx, []byte("x"), Group("gx"))
			return err
		}},
		{name: "enqueue id", run: func(ctx context.Context, f *fixture) error {
			_, err := f.q.Enqueue(ctx, []byte("x"), ID("new-id"))
			return err
		}},
		{name: "enqueue delayed", run: func(ctx context.Context, f *fixture) error {
			_, err := f.q.Enqueue(ctx, []byte("x"), Delay(time.Millisecond))
			return err
		}},
		{name: "enqueue earlier delayed", run: func(ctx context.Context, f *fixture) error {
			_, err := f.q.Enqueue(ctx, []byte("x"), At(time.Now().Add(time.Second)))
			return err
		}},
		{name: "batch ready", run: func(ctx context.Context, f *fixture) error { return batch(ctx, f) }},
		{name: "batch delayed", run: func(ctx context.Context, f *fixture) error { return batch(ctx, f, Delay(time.Second)) }},
		{name: "take", run: func(ctx context.Context, f *fixture) error {
			_, _, err := shardTake(sh(f.q), ctx, sh(f.q).Keys().HighFirst(), 100, time.Minute)
			return err
		}},
		// Ack of a generated id is ZREM lease + HDEL record, pipelined: with
		// either key corrupted every lease is already gone with it.
		{name: "ack", run: func(ctx context.Context, f *fixture) error {
			f.live.d.CallerID = false
			return sh(f.q).AckBatch(ctx, []store.AckReq{f.live.d.Req()})[0]
		}, pipelinedKeys: []string{sh(q).Keys().Leases(), sh(q).Keys().Inflight()}},
		{name: "ack caller id", run: func(ctx context.Context, f *fixture) error {
			return sh(f.q).AckBatch(ctx, []store.AckReq{f.live.d.Req()})[0]
		}},
		{name: "retry now", run: func(ctx context.Context, f *fixture) error {
			return failTok(sh(f.q), ctx, f.live.token(), 0, "again", "retry")
		}},
		{name: "retry later", run: func(ctx context.Context, f *fixture) error {
			return failTok(sh(f.q), ctx, f.live.token(), time.Millisecond, "again", "retry")
		}},
		{name: "dead", run: func(ctx context.Context, f *fixture) error {
			return failTok(sh(f.q), ctx, f.live.token(), 0, "fatal", "dead")
		}},
		{name: "bury", run: func(ctx context.Context, f *fixture) error {
			return failTok(sh(f.q), ctx, f.live.token(), 0, "corrupt", "bury")
		}},
		{name: "release", run: func(ctx context.Context, f *fixture) error {
			_, err := sh(f.q).Release(ctx, []string{f.live.token()})
			return err
		}},
		{name: "extend", run: func(ctx context.Context, f *fixture) error { return f.live.Extend(ctx, time.Hour) }},
		{name: "renew", run: func(ctx context.Context, f *fixture) error {
			_, err := sh(f.q).Renew(ctx, []string{f.live.token()}, time.Hour)
			return err
		}},
		{name: "cancel in flight", run: func(ctx context.Context, f *fixture) error { return f.q.Cancel(ctx, f.live.ID) }},
		{name: "sweep", run: func(ctx context.Context, f *fixture) error {
			_, _, _, err := sh(f.q).Sweep(ctx, 100)
			return err
		}},
		{name: "promote", run: func(ctx context.Context, f *fixture) error {
			_, _, _, err := sh(f.q).Promote(ctx)
			return err
		}},
		{name: "cancel ready", run: func(ctx context.Context, f *fixture) error { return f.q.Cancel(ctx, f.readyID) }},
		{name: "cancel delayed", run: func(ctx context.Context, f *fixture) error { return f.q.Cancel(ctx, f.delID) }},
		{name: "purge", run: func(ctx context.Context, f *fixture) error {
			_, err := f.q.Purge(ctx)
			return err
		}},
		{name: "requeue dead", run: func(ctx context.Context, f *fixture) error { return f.q.RequeueDead(ctx, "dead-id") }},
		{name: "requeue all dead", run: func(ctx context.Context, f *fixture) error {
			_, err := f.q.RequeueAllDead(ctx)
			return err
		}},
		{name: "purge dead", run: func(ctx context.Context, f *fixture) error {
			_, err := f.q.PurgeDead(ctx)
			return err
		}},
		{name: "pause", run: func(ctx context.Context, f *fixture) error { return f.q.Pause(ctx) }},
		// Resume is DEL paused + ZADD wake-up: it succeeds once the pause is
		// lifted, and a wrong-typed wake-up key fails only the hint.
		{name: "resume", run: func(ctx context.Context, f *fixture) error { return f.q.Resume(ctx) }},
		{name: "peek", run: func(ctx context.Context, f *fixture) error {
			_, err := f.q.Peek(ctx, 100)
			return err
		}},
		{name: "stats", run: func(ctx context.Context, f *fixture) error {
			_, err := f.q.Stats(ctx)
			return err
		}},
	}
}

func TestScriptsWithAWrongTypedKeyChangeNothing(t *testing.T) {
	for _, l := range threeLanes {
		t.Run(l.name, func(t *testing.T) {
			probe := newFixture(t, l.layout)
			for oi := range scriptOps(probe.q) {
				for ki := range sh(probe.q).Keys().All() {
					f := newFixture(t, l.layout)
					op := scriptOps(f.q)[oi] // its pipelinedKeys name this queue's keys
					key := sh(f.q).Keys().All()[ki]
					short := key[strings.LastIndex(key, "}:")+2:]
					corrupt(t, f.q, key)
					before := snapshot(t, f.q)
					err := op.run(ctxT(t, 10*time.Second), f)
					if err == nil {
						continue // this operation does not touch the key, or copes with it
					}
					after := snapshot(t, f.q)
					for k := range after {
						if _, ok := before[k]; !ok {
							before[k] = "" // a key the failed operation made
						}
					}
					for k, v := range before {
						if after[k] != v && !(contains(op.pipelinedKeys, key) && k != key) {
							t.Errorf("%s with %s of the wrong type failed (%v) but changed %s", op.name, short, err, k[strings.LastIndex(k, "}:")+2:])
						}
					}
				}
			}
		})
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestWrongTypedLaneFailsBatchAndReleasesNothing is the case written
// out: a batch across two lanes, the second one of the wrong type, and a
// caller id whose enqueue fails and must stay free for the producer's retry.
func TestWrongTypedLaneFailsBatchAndReleasesNothing(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(2)})
	corrupt(t, q, sh(q).Keys().Lanes()[1])
	_, err := q.EnqueueBatch(ctx, []EnqueueItem{{Payload: []byte("a"), Options: []Option{Priority(0)}},
		{Payload: []byte("b"), Options: []Option{Priority(1)}}})
	require.Error(t, err)
	var n int
	require.NoError(t, c.Do(ctx, radix.Cmd(&n, "LLEN", sh(q).Keys().Lanes()[0])))
	assert.Zero(t, n, "all or none: the first message must not be stored")

	_, err = q.Enqueue(ctx, []byte("order"), Priority(1), ID("order-77"))
	require.Error(t, err)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", sh(q).Keys().Lanes()[1])))
	_, err = q.Enqueue(ctx, []byte("order"), Priority(1), ID("order-77"))
	require.NoError(t, err, "the failed enqueue must not keep the id reserved")
}

// A counter that INCR refuses (a leading zero) fails the scripts that need
// it before their first write, like a key of the wrong type.
func TestScriptsWithAnUnusableCounterChangeNothing(t *testing.T) {
	for _, layout := range []Layout{Levels(3), Range(0, 99, 3)} {
		probe := newFixture(t, layout)
		for oi := range scriptOps(probe.q) {
			f := newFixture(t, layout)
			op := scriptOps(f.q)[oi]
			require.NoError(t, sh(f.q).Client().Do(context.Background(), radix.Cmd(nil, "SET", sh(f.q).Keys().Seq(), "007")))
			before := snapshot(t, f.q)
			if err := op.run(ctxT(t, 10*time.Second), f); err == nil {
				continue
			}
			after := snapshot(t, f.q)
			for k, v := range before {
				assert.Equal(t, v, after[k], "%s with seq 007 failed but changed %s", op.name, k)
			}
		}
	}
}

// A Range entry that does not decode is buried with its envelope (not its
// segment sequence), so that purging the dead letters releases its caller id.
func TestBuriedRangeEntryReleasesItsIDOnPurge(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: seqRange(0, 9, 1)})
	_, err := q.Enqueue(ctx, []byte("x"), ID("will-rot"), Priority(5))
	require.NoError(t, err)
	var members []string
	require.NoError(t, c.Do(ctx, radix.Cmd(&members, "ZRANGE", sh(q).Keys().Lanes()[0], "0", "-1")))
	require.Len(t, members, 1)
	rotten := []byte(members[0])
	rotten[8] = 99 // an envelope version that does not exist
	p := radix.NewPipeline()
	p.Append(radix.Cmd(nil, "DEL", sh(q).Keys().Lanes()[0]))
	p.Append(radix.Cmd(nil, "ZADD", sh(q).Keys().Lanes()[0], "-5", string(rotten)))
	require.NoError(t, c.Do(ctx, p))
	got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
	require.NoError(t, err)
	require.Empty(t, got, "the rotten entry is buried, not delivered")
	dead := onlyDeadLetter(t, q)
	assert.Equal(t, "will-rot", dead.ID)
	n, err := q.PurgeDead(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	_, err = q.Enqueue(ctx, []byte("x"), ID("will-rot"))
	assert.NoError(t, err, "purging the dead letters released the id")
}
