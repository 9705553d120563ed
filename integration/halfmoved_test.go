package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// DESIGN.md §5: every operation of a queue run against a slot half moved
// between two nodes (the slot MIGRATING on one, IMPORTING on the other, some
// of a shard's keys on each, as an operator's resharding leaves it between
// two MIGRATE batches). Each operation either runs (a command whose key is
// where it is sent) or waits, retried whole, until the move is over; none
// reports a raw cluster error within its deadline, nothing is lost, nothing
// is split into two copies of a key, and the move can finish (a key on both
// nodes would stop it with BUSYKEY).
//
// The scripts that may touch a key they do not declare (a group's list, a
// Range priority's list, a lane named in the filled index) are fenced (lua.go):
// before that, a grouped enqueue ran on the importing node and created a
// second group list there (the message was lost with the REPLACE that
// finishes such a move), and Peek of a sharded Range queue failed with
// "Script attempted to access a non local key".
func TestEveryOperationAgainstAHalfMovedSlot(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := c.client(ctx, 64)

	layouts := []struct {
		name   string
		cfg    prioq.Config
		prio   func(level int) int64 // the priority of level 0 (low), 1, 2 (high)
		shards int
	}{
		{"Levels3x2", prioq.Config{Layout: prioq.Levels(3), Shards: 2}, func(l int) int64 { return int64(l) }, 2},
		{"Range4x2", prioq.Config{Layout: prioq.Range(-100, 100, 4), Shards: 2}, func(l int) int64 { return int64(40*l - 40) }, 2},
		{"Levels12", prioq.Config{Layout: prioq.Levels(12)}, func(l int) int64 { return int64(5 * l) }, 1},          // a filled index
		{"Range12", prioq.Config{Layout: prioq.Range(0, 1199, 12)}, func(l int) int64 { return int64(500 * l) }, 1}, // lists and a filled index
	}
	// Which of the shard's keys move before the operations run: every other
	// one (twice, the other half the second time); the lanes, the counts
	// and the wake-up (what a grouped enqueue declares) while the group's
	// keys and everything else stay; or the other way round.
	lanes := func(_ int, k string) bool {
		return strings.Contains(k, ":lane:") && !strings.Contains(k, ":g:") ||
			strings.HasSuffix(k, ":counts") || strings.HasSuffix(k, ":wake")
	}
	splits := []struct {
		name string
		move func(i int, key string) bool
	}{
		{"even", func(i int, _ string) bool { return i%2 == 0 }},
		{"odd", func(i int, _ string) bool { return i%2 == 1 }},
		{"lanes", lanes},
		{"rest", func(i int, k string) bool { return !lanes(i, k) }}, // the group's and the priorities' lists move
	}
	for _, l := range layouts {
		for _, sp := range splits {
			t.Run(l.name+"/"+sp.name, func(t *testing.T) {
				h := &halfMoved{t: t, c: c, ctx: ctx, cl: cl, prio: l.prio}
				h.cfg = l.cfg
				h.cfg.CallTimeout = 20 * time.Second
				q, err := prioq.Open(ctx, cl, queueName(t), h.cfg)
				require.NoError(t, err)
				h.q = q
				h.run(sp.move)
			})
		}
	}
}

// halfMoved is one run of TestEveryOperationAgainstAHalfMovedSlot.
type halfMoved struct {
	t    *testing.T
	c    *testCluster
	ctx  context.Context
	cl   prioq.Client
	q    *prioq.Queue
	cfg  prioq.Config
	prio func(level int) int64

	mu     sync.Mutex
	want   map[string]bool // payloads a drain must deliver, once each
	errs   []string        // operations that failed
	groupQ []string        // the group's payloads in enqueue order
}

const halfMovedGroup = "tenant-0"

func (h *halfMoved) expect(payloads ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range payloads {
		h.want[p] = true
	}
}

func (h *halfMoved) failed(op string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, fmt.Sprintf("%s: %v", op, err))
}

func (h *halfMoved) enqueue(payload string, opts ...prioq.Option) string {
	h.t.Helper()
	id, err := h.q.Enqueue(h.ctx, []byte(payload), opts...)
	require.NoError(h.t, err, "enqueue %s", payload)
	return id
}

// shardOfGroup is the shard that holds the group's messages (read from
// Stats: a shard's ready count grows by the group's first message).
func (h *halfMoved) shardOfGroup() int {
	t := h.t
	if h.q.Shards() == 1 {
		h.enqueue("g1", prioq.Priority(h.prio(1)), prioq.Group(halfMovedGroup))
		return 0
	}
	before, err := h.q.Stats(h.ctx)
	require.NoError(t, err)
	h.enqueue("g1", prioq.Priority(h.prio(1)), prioq.Group(halfMovedGroup))
	after, err := h.q.Stats(h.ctx)
	require.NoError(t, err)
	for i := range after.Shards {
		if after.Shards[i].Ready > before.Shards[i].Ready {
			return i
		}
	}
	t.Fatal("the group's message is in no shard")
	return -1
}

func (h *halfMoved) run(move func(i int, key string) bool) {
	t, ctx, q := h.t, h.ctx, h.q
	h.want = map[string]bool{}

	// The state the operations meet: held messages of a consumer, one whose
	// lease ends during the move, a dead letter, ready messages (some of a
	// group), delayed ones, one due during the move.
	shard := h.shardOfGroup()
	h.groupQ = []string{"g1"}
	for i := range 3 {
		h.enqueue(fmt.Sprintf("h%d", i+1), prioq.Priority(h.prio(2)))
	}
	holder, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer closeWithin(t, holder, 10*time.Second)
	var held []*prioq.Message
	for len(held) < 3 {
		msgs, err := holder.ReceiveBatch(ctx, 3-len(held))
		require.NoError(t, err)
		held = append(held, msgs...)
	}
	h.enqueue("x1", prioq.Priority(h.prio(2)))
	short, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true, Lease: 400 * time.Millisecond})
	require.NoError(t, err)
	expiring, err := short.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "x1", string(expiring.Payload))
	require.NoError(t, short.Close(ctx)) // gives nothing back: it holds nothing

	deadCfg := h.cfg
	deadCfg.MaxAttempts = 1
	qd, err := prioq.Open(ctx, h.cl, q.Name(), deadCfg)
	require.NoError(t, err)
	h.enqueue("dl", prioq.Priority(h.prio(2)))
	dcons, err := qd.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	dm, err := dcons.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "dl", string(dm.Payload))
	require.NoError(t, dm.Retry(ctx, 0, "to the dead letters"))
	require.NoError(t, dcons.Close(ctx))

	// A message whose ack rides on the next take (AckAndReceive), made
	// during the move.
	h.enqueue("a1", prioq.Priority(h.prio(2)))
	arc, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer closeWithin(t, arc, 10*time.Second)
	ar, err := arc.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "a1", string(ar.Payload))

	h.enqueue("g2", prioq.Priority(h.prio(1)), prioq.Group(halfMovedGroup))
	h.groupQ = append(h.groupQ, "g2")
	for i := range 6 {
		h.enqueue(fmt.Sprintf("p%d", i), prioq.Priority(h.prio(i%3)))
	}
	h.enqueue("d1", prioq.Priority(h.prio(0)), prioq.Delay(700*time.Millisecond))
	dFar := h.enqueue("d2", prioq.Priority(h.prio(0)), prioq.Delay(time.Hour))
	h.enqueue("j1", prioq.Priority(h.prio(0)), prioq.ID("job-x"))
	h.expect("g1", "g2", "p0", "p1", "p2", "p3", "p4", "p5", "d1",
		"x1",                    // its lease ends during the move: delivered again
		string(held[1].Payload), // retried during the move
		"dl",                    // requeued during the move
	)

	// Half of the shard's keys to the other node.
	slot := q.ShardSlots()[shard]
	from := h.c.byAddr(h.c.ownerOf(slot))
	to := h.c.primaries[0]
	if to == from {
		to = h.c.primaries[1]
	}
	mv := h.c.openMove(slot, to)
	keys := mv.keysLeft(1000)
	sort.Strings(keys)
	var moving []string
	for i, k := range keys {
		if move(i, k) {
			moving = append(moving, k)
		}
	}
	require.NotEmpty(t, moving)
	require.Less(t, len(moving), len(keys), "some keys stay")
	require.NoError(t, mv.migrate(false, moving...))
	t.Logf("slot %d half moved from %s to %s: %d of %d keys moved", slot, from.addr(), to.addr(), len(moving), len(keys))

	// Every operation, at once, while the slot is half moved.
	var wg sync.WaitGroup
	op := func(name string, f func(ctx context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := f(octx); err != nil {
				h.failed(name, err)
			}
		}()
	}
	op("Enqueue", func(ctx context.Context) error {
		_, err := q.Enqueue(ctx, []byte("e1"), prioq.Priority(h.prio(0)))
		h.expect("e1")
		return err
	})
	op("Enqueue Group", func(ctx context.Context) error {
		_, err := q.Enqueue(ctx, []byte("e2"), prioq.Priority(h.prio(1)), prioq.Group(halfMovedGroup))
		h.expect("e2")
		return err
	})
	op("Enqueue ID", func(ctx context.Context) error {
		_, err := q.Enqueue(ctx, []byte("e3"), prioq.Priority(h.prio(2)), prioq.ID("job-new"))
		h.expect("e3")
		return err
	})
	op("Enqueue Delay", func(ctx context.Context) error {
		_, err := q.Enqueue(ctx, []byte("e4"), prioq.Priority(h.prio(1)), prioq.Delay(10*time.Millisecond))
		h.expect("e4")
		return err
	})
	op("EnqueueBatch", func(ctx context.Context) error {
		res, err := q.EnqueueBatch(ctx, []prioq.EnqueueItem{
			{Payload: []byte("e5"), Options: []prioq.Option{prioq.Priority(h.prio(2))}},
			{Payload: []byte("e6"), Options: []prioq.Option{prioq.Priority(h.prio(0))}},
		})
		h.expect("e5", "e6")
		if err == nil {
			for _, r := range res {
				err = cmpErr(err, r.Err)
			}
		}
		return err
	})
	op("Cancel delayed", func(ctx context.Context) error { return q.Cancel(ctx, dFar) })
	op("Cancel ready", func(ctx context.Context) error { return q.Cancel(ctx, "job-x") })
	op("Peek", func(ctx context.Context) error {
		got, err := q.Peek(ctx, 50)
		if err == nil && len(got) == 0 {
			err = fmt.Errorf("nothing peeked")
		}
		return err
	})
	op("Stats", func(ctx context.Context) error {
		st, err := q.Stats(ctx)
		if err == nil && st.Ready == 0 {
			err = fmt.Errorf("stats say nothing is ready: %+v", st)
		}
		return err
	})
	op("Len", func(ctx context.Context) error { _, err := q.Len(ctx); return err })
	op("Groups", func(ctx context.Context) error { _, err := q.Groups(ctx, 10); return err })
	op("SetGroupLimit", func(ctx context.Context) error {
		return q.SetGroupLimit(ctx, halfMovedGroup, prioq.GroupLimit{Concurrency: 8})
	})
	op("SetRateLimit", func(ctx context.Context) error {
		return q.SetRateLimit(ctx, prioq.Rate{N: 100000, Per: time.Second})
	})
	op("DeadLetters+RequeueDead", func(ctx context.Context) error {
		dls, err := q.DeadLetters(ctx, 0, 10)
		if err != nil {
			return err
		}
		if len(dls) != 1 || string(dls[0].Payload) != "dl" {
			return fmt.Errorf("dead letters: %d, want the one", len(dls))
		}
		return q.RequeueDead(ctx, dls[0].ID)
	})
	op("Ack", func(ctx context.Context) error { return held[0].Ack(ctx) })
	var early []string // taken by AckAndReceive during the move
	op("AckAndReceive", func(ctx context.Context) error {
		m, err := arc.AckAndReceive(ctx, ar)
		if err != nil {
			return err
		}
		early = append(early, string(m.Payload))
		return m.Ack(ctx)
	})
	op("Retry", func(ctx context.Context) error { return held[1].Retry(ctx, time.Millisecond, "again") })
	op("Extend", func(ctx context.Context) error { return held[2].Extend(ctx, time.Minute) })
	op("Message", func(ctx context.Context) error {
		st, err := q.Message(ctx, held[2].ID) // in flight throughout: extended, acked after
		if err == nil && st.State != prioq.MessageInFlight {
			err = fmt.Errorf("%s is %s, want in flight", held[2].ID, st.State)
		}
		if err == nil {
			_, err = q.Message(ctx, "nowhere-at-all") // every key read
			if errors.Is(err, prioq.ErrNotFound) {
				err = nil
			}
		}
		return err
	})

	// The lease of x1 ends and d1 falls due while the slot is half moved:
	// a consumer's sweep and promoter meet it too.
	var bgErrs []string
	var bgMu sync.Mutex
	worker, err := q.NewConsumer(prioq.ConsumerConfig{SweepInterval: 100 * time.Millisecond, PromoteWait: 200 * time.Millisecond,
		OnError: func(err error) { bgMu.Lock(); bgErrs = append(bgErrs, err.Error()); bgMu.Unlock() }})
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond)

	mv.finish() // fails the test when a key is on both nodes (BUSYKEY)
	wg.Wait()
	assert.Empty(t, h.errs, "operations during the move")
	assert.Empty(t, mv.keysLeftOn(from), "every key of the slot moved")

	// Drain: what was promised is delivered, once, the group in its order.
	require.NoError(t, held[2].Ack(ctx), "the extended message is still held")
	got := map[string]int{}
	var groupGot []string
	for _, p := range early {
		got[p]++
		if slices.Contains([]string{"g1", "g2", "e2"}, p) {
			groupGot = append(groupGot, p)
		}
	}
	for drained := len(early); drained < len(h.want); {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := worker.Receive(rctx)
		cancel()
		if err != nil {
			t.Errorf("drain: %v after %d of %d (got %v)", err, drained, len(h.want), got)
			break
		}
		p := string(m.Payload)
		got[p]++
		if slices.Contains([]string{"g1", "g2", "e2"}, p) {
			groupGot = append(groupGot, p)
		}
		require.NoError(t, m.Ack(ctx))
		drained++
	}
	for p := range h.want {
		assert.Equal(t, 1, got[p], "%s delivered once", p)
	}
	for p, n := range got {
		assert.True(t, h.want[p], "%s delivered (%d times) but not expected", p, n)
	}
	assert.Equal(t, []string{"g1", "g2", "e2"}, groupGot, "the group's messages in their order")
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Ready+st.Delayed+st.InFlight+st.Dead, "nothing left: %+v", st)
	closeWithin(t, worker, 10*time.Second)
	bgMu.Lock()
	for _, e := range bgErrs {
		assert.NotContains(t, e, "non local key", "background error")
	}
	bgMu.Unlock()

	// Back to the first node, half moved again: Pause, Resume and Purge.
	for i := range 4 {
		h.enqueue(fmt.Sprintf("z%d", i), prioq.Priority(h.prio(i%3)), prioq.Group(halfMovedGroup))
		h.enqueue(fmt.Sprintf("y%d", i), prioq.Priority(h.prio(i%3)))
	}
	back := h.c.openMove(slot, from)
	keys = back.keysLeft(1000)
	sort.Strings(keys)
	moving = moving[:0]
	for i, k := range keys {
		if move(i, k) {
			moving = append(moving, k)
		}
	}
	if len(moving) > 0 && len(moving) < len(keys) {
		require.NoError(t, back.migrate(false, moving...))
	}
	h.errs = nil
	op("Pause+Resume", func(ctx context.Context) error {
		if err := q.Pause(ctx); err != nil {
			return err
		}
		return q.Resume(ctx)
	})
	var purged int64
	op("Purge", func(ctx context.Context) error {
		var err error
		purged, err = q.Purge(ctx)
		return err
	})
	time.Sleep(500 * time.Millisecond)
	back.finish()
	wg.Wait()
	assert.Empty(t, h.errs, "operations during the move back")
	st, err = q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(8), purged, "purged")
	assert.Zero(t, st.Ready+st.Delayed+st.InFlight+st.Dead, "nothing left after Purge: %+v", st)
}

// keysLeftOn lists keys of the move's slot still on node p.
func (m *slotMove) keysLeftOn(p *localProc) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	require.NoError(m.c.t, nodeDo(ctx, p.addr(), &keys, "CLUSTER", "GETKEYSINSLOT", m.slot, "1000"))
	return keys
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// The same for AtMostOnce queues (no leases, groups or dead letters): a
// consumer blocked on the lanes (Levels) or on the wake-up (Range) while the
// slot is half moved, and the operations of such a queue, at once.
func TestAtMostOnceAgainstAHalfMovedSlot(t *testing.T) {
	leakCheck(t)
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client(ctx, 32)
	for _, l := range []struct {
		name string
		cfg  prioq.Config
	}{
		{"Levels3", prioq.Config{Layout: prioq.Levels(3)}},
		{"Levels3x2", prioq.Config{Layout: prioq.Levels(3), Shards: 2}},
		{"Range4", prioq.Config{Layout: prioq.Range(0, 99, 4)}},
	} {
		for _, even := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/even=%v", l.name, even), func(t *testing.T) {
				cfg := l.cfg
				cfg.Mode, cfg.CallTimeout = prioq.AtMostOnce, 20*time.Second
				q, err := prioq.Open(ctx, cl, queueName(t), cfg)
				require.NoError(t, err)
				want := map[string]bool{}
				for i := range 6 {
					p := fmt.Sprintf("p%d", i)
					_, err := q.Enqueue(ctx, []byte(p), prioq.Priority(int64(i%3)))
					require.NoError(t, err)
					want[p] = true
				}
				_, err = q.Enqueue(ctx, []byte("c1"), prioq.ID("cancel-me"))
				require.NoError(t, err)
				_, err = q.Enqueue(ctx, []byte("d1"), prioq.Delay(300*time.Millisecond))
				require.NoError(t, err)
				want["d1"] = true

				slot := q.ShardSlots()[0]
				from := c.byAddr(c.ownerOf(slot))
				to := c.primaries[0]
				if to == from {
					to = c.primaries[1]
				}
				mv := c.openMove(slot, to)
				keys := mv.keysLeft(1000)
				sort.Strings(keys)
				var moving []string
				for i, k := range keys {
					if (i%2 == 0) == even {
						moving = append(moving, k)
					}
				}
				require.NoError(t, mv.migrate(false, moving...))

				var mu sync.Mutex
				var errs []string
				var wg sync.WaitGroup
				op := func(name string, f func(ctx context.Context) error) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						octx, cancel := context.WithTimeout(ctx, 30*time.Second)
						defer cancel()
						if err := f(octx); err != nil {
							mu.Lock()
							errs = append(errs, name+": "+err.Error())
							mu.Unlock()
						}
					}()
				}
				got := map[string]int{}
				cons, err := q.NewConsumer(prioq.ConsumerConfig{PromoteWait: 100 * time.Millisecond})
				require.NoError(t, err)
				receive := func(ctx context.Context) error {
					m, err := cons.Receive(ctx)
					if err == nil {
						mu.Lock()
						got[string(m.Payload)]++
						mu.Unlock()
					}
					return err
				}
				op("Receive", receive)
				op("Enqueue", func(ctx context.Context) error {
					_, err := q.Enqueue(ctx, []byte("e1"), prioq.Priority(1))
					return err
				})
				op("EnqueueBatch", func(ctx context.Context) error {
					res, err := q.EnqueueBatch(ctx, []prioq.EnqueueItem{{Payload: []byte("e2")}, {Payload: []byte("e3"), Options: []prioq.Option{prioq.Priority(2)}}})
					for _, r := range res {
						err = cmpErr(err, r.Err)
					}
					return err
				})
				op("Cancel", func(ctx context.Context) error { return q.Cancel(ctx, "cancel-me") })
				op("Peek", func(ctx context.Context) error { _, err := q.Peek(ctx, 20); return err })
				op("Stats", func(ctx context.Context) error { _, err := q.Stats(ctx); return err })
				want["e1"], want["e2"], want["e3"] = true, true, true
				time.Sleep(800 * time.Millisecond)
				mv.finish()
				wg.Wait()
				assert.Empty(t, errs, "operations during the move")
				for n := len(got); n < len(want); n++ {
					require.NoError(t, receive(ctx))
				}
				closeWithin(t, cons, 10*time.Second)
				for p := range want {
					assert.Equal(t, 1, got[p], "%s delivered once", p)
				}
				assert.Len(t, got, len(want), "delivered: %v", got)
			})
		}
	}
}
