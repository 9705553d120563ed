package prioq

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/consume"
	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// A Range queue of format 4 keeps, per segment, an index of the priorities
// that have messages waiting (keys.go): members are priorities written as
// prio_str writes them. A member that names no priority (a hand edit, a
// foreign writer, an entry of the earlier form left by a lost meta key) must
// be dealt with alone: before, takes passed its whole segment by, and 0 of
// the messages beside it were delivered.

// damagedRangeLayouts: a Range of three segments, and one of twelve, whose
// takes read the filled index (format 5). prios are distinct, two per
// damaged segment, highest first.
var damagedRangeLayouts = []struct {
	name   string
	layout Layout
	prios  []int64
	empty  int64 // a priority of a segment that holds no message (-1 << 62: none)
}{
	{"Range3", Range(-10, 10, 3), []int64{9, 5, 2, 0, -5, -9}, -1 << 62},
	{"Range12", Range(-120, 119, 12), []int64{110, 105, 5, 0, -101, -110}, -50},
}

// noPriority are index members that name no priority, and the scores they
// are given: before, among (on a tie, members sort bytewise) and after the
// segment's own names.
var noPriority = []struct{ member, score string }{
	{"", "-inf"}, {"x", "-1000"}, {"1e999", "-2000.5"}, {"-", "-9"},
	{"007", "-5"}, {"12345678901234567890", "-4.5"}, {"-0", "+inf"}, {"+3", "1e300"},
}

// receiveIDs receives n messages one by one (each Receive must return within
// 2 s), acking them in AtLeastOnce mode, and returns their ids.
func receiveIDs(t *testing.T, ctx context.Context, q *Queue, cons *Consumer, n int) []string {
	t.Helper()
	var got []string
	for range n {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := cons.Receive(rctx)
		cancel()
		if err != nil {
			t.Errorf("receive %d of %d: %v", len(got)+1, n, err)
			break
		}
		got = append(got, m.ID)
		if q.Mode() == AtLeastOnce {
			require.NoError(t, m.Ack(ctx))
		}
	}
	return got
}

// receivesNothing checks that a Receive finds nothing more within 300 ms.
func receivesNothing(t *testing.T, ctx context.Context, cons *Consumer) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	m, err := cons.Receive(rctx)
	if err == nil {
		t.Errorf("received %s, want nothing", m.ID)
	}
}

// indexMembers is the members of every segment index of q, lane 0 first.
func indexMembers(t *testing.T, ctx context.Context, q *Queue) [][]string {
	t.Helper()
	out := make([][]string, len(sh(q).Keys().Lanes()))
	for i, l := range sh(q).Keys().Lanes() {
		require.NoError(t, sh(q).Client().Do(ctx, radix.Cmd(&out[i], "ZRANGE", l, "0", "-1")))
	}
	return out
}

func TestRangeIndexEntryThatNamesNoPriorityIsSetAsideAlone(t *testing.T) {
	c := newClient(t)
	for _, l := range damagedRangeLayouts {
		for _, m := range bothModes {
			t.Run(l.name+"/"+m.name, func(t *testing.T) {
				ctx := ctxT(t, 30*time.Second)
				var logged lockedBuffer
				q := openQueue(t, c, Config{Layout: l.layout, Mode: m.mode, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
				require.Equal(t, l.name == "Range12", sh(q).Filled())
				var want []string
				damaged := map[int]bool{}
				for _, p := range l.prios {
					id, err := q.Enqueue(ctx, []byte(fmt.Sprint(p)), Priority(p))
					require.NoError(t, err)
					want = append(want, id)
					lane, _ := l.layout.l.LaneOf(p)
					damaged[lane] = true
				}
				if l.empty != -1<<62 {
					lane, _ := l.layout.l.LaneOf(l.empty)
					damaged[lane] = true
				}
				for lane := range damaged {
					args := []string{sh(q).Keys().Lanes()[lane]}
					for _, b := range noPriority {
						args = append(args, b.score, b.member)
					}
					require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", args...)))
				}

				peek, err := q.Peek(ctx, 100)
				require.NoError(t, err, "Peek passes the members over")
				assert.Equal(t, want, infoIDs(peek))

				cons := newConsumer(t, q, ConsumerConfig{})
				assert.Equal(t, want, receiveIDs(t, ctx, q, cons, len(want)), "every message, in priority order")
				receivesNothing(t, ctx, cons)

				for lane, members := range indexMembers(t, ctx, q) {
					assert.Empty(t, members, "lane %d: every member that names no priority left the index", lane)
				}
				dead, err := q.DeadLetters(ctx, 0, 1000)
				require.NoError(t, err)
				assert.Len(t, dead, len(damaged)*len(noPriority), "each member is set aside once, alone")
				for _, d := range dead {
					assert.Contains(t, d.Reason, "names no priority")
					assert.NotEmpty(t, d.Raw)
				}
				assert.Contains(t, logged.String(), sh(q).Keys().Lanes()[len(sh(q).Keys().Lanes())-1])
			})
		}
	}
}

// infoIDs lists the ids of what Peek returned.
func infoIDs(infos []MessageInfo) []string {
	var out []string
	for _, m := range infos {
		out = append(out, m.ID)
	}
	return out
}

// A member that names no priority may stand for messages: "007" in the
// place of priority 7, whose own member "7" is gone, is the only name of
// that list. The take names the list again ("7"), and its messages are
// served in their turn; the dead letter says so.
func TestRangeIndexEntryStandingForAListLosesNothing(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Layout: Range(-10, 10, 3), Mode: m.mode})
			seg := sh(q).Keys().Lanes()[2] // priorities 4..10
			var want []string
			for _, p := range []int64{9, 7, 7, 5} {
				id, err := q.Enqueue(ctx, []byte(fmt.Sprint(p)), Priority(p))
				require.NoError(t, err)
				want = append(want, id)
			}
			// Priority 7's member written otherwise: its list is named by
			// "007" alone.
			p := radix.NewPipeline()
			p.Append(radix.Cmd(nil, "ZREM", seg, "7"))
			p.Append(radix.Cmd(nil, "ZADD", seg, "-7", "007"))
			require.NoError(t, c.Do(ctx, p))

			cons := newConsumer(t, q, ConsumerConfig{})
			assert.Equal(t, want, receiveIDs(t, ctx, q, cons, len(want)))
			receivesNothing(t, ctx, cons)
			d := onlyDeadLetter(t, q)
			assert.Contains(t, d.Reason, "the list of priority 7 it stood for is named again")

		})
	}
}

// A key under the name a member gives ("prio:007": none of prioq's) is left
// in place; the dead letter names it. Peek reads no such key (before, it
// failed on its content), and takes serve the segment.
func TestRangeIndexEntryNamingAForeignKeyLeavesItInPlace(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Layout: Range(-10, 10, 3), Mode: m.mode})
			seg := sh(q).Keys().Lanes()[2] // priorities 4..10
			foreign := sh(q).Keys().Prefix() + "prio:007"
			var want []string
			for _, p := range []int64{9, 7, 5} {
				id, err := q.Enqueue(ctx, []byte(fmt.Sprint(p)), Priority(p))
				require.NoError(t, err)
				want = append(want, id)
			}
			p := radix.NewPipeline()
			p.Append(radix.Cmd(nil, "RPUSH", foreign, "not prioq's"))
			p.Append(radix.Cmd(nil, "ZADD", seg, "-10", "007"))
			require.NoError(t, c.Do(ctx, p))
			peek, err := q.Peek(ctx, 10)
			require.NoError(t, err, "Peek reads no list that no priority names")
			assert.Equal(t, want, infoIDs(peek))

			cons := newConsumer(t, q, ConsumerConfig{})
			assert.Equal(t, want, receiveIDs(t, ctx, q, cons, len(want)))
			receivesNothing(t, ctx, cons)
			var left []string
			require.NoError(t, c.Do(ctx, radix.Cmd(&left, "LRANGE", foreign, "0", "-1")))
			assert.Equal(t, []string{"not prioq's"}, left, "the key it names is left in place")
			d := onlyDeadLetter(t, q)
			assert.Contains(t, d.Reason, "the key "+foreign+" it names (a list, none of prioq's) is left in place")
			assert.Equal(t, "2|-10|007", string(d.Raw), "the member, where it was")
		})
	}
}

// An entry of the earlier form (sequence and envelope: what a lost meta key
// leaves of a Range queue of format 2 or 3 served as format 4) is a message:
// set aside in the dead letters with its segment and score, where
// RequeueDead puts it back as a message of this form. (Before the fix the
// take kept it and passed its whole segment by: the message beside it, of
// a priority below it, waited.)
func TestRangeIndexEntryOfTheEarlierFormIsRequeueable(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			var logged lockedBuffer
			q := openQueue(t, c, Config{Layout: Range(0, 99, 3), Mode: m.mode, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			old := (&store.Envelope{ID: "old-1", CallerID: true, Priority: 90, EnqueuedMs: 1_700_000_000_000, Payload: []byte("earlier")}).Encode()
			member := "\x00\x00\x00\x00\x00\x00\x00\x01" + string(old)
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", sh(q).Keys().Lanes()[2], "-90", member)))
			good, err := q.Enqueue(ctx, []byte("good"), Priority(80)) // same segment
			require.NoError(t, err)

			cons := newConsumer(t, q, ConsumerConfig{})
			assert.Equal(t, []string{good}, receiveIDs(t, ctx, q, cons, 1))
			var members []string
			require.NoError(t, c.Do(ctx, radix.Cmd(&members, "ZRANGE", sh(q).Keys().Lanes()[2], "0", "-1")))
			assert.Empty(t, members, "the entry left the index")
			assert.Contains(t, logged.String(), sh(q).Keys().Lanes()[2])

			d := onlyDeadLetter(t, q)
			assert.Equal(t, "old-1", d.ID)
			assert.Equal(t, int64(90), d.Priority)
			assert.Contains(t, d.Reason, "earlier Range form")
			require.NoError(t, q.RequeueDead(ctx, "old-1"))
			assert.Equal(t, []string{"old-1"}, receiveIDs(t, ctx, q, cons, 1), "requeued as a message of this form")
		})
	}
}

// Every other script that reads a Range index passes a member that names no
// priority over, alone: Peek, Stats, Cancel, the probe of a consumer of a
// queue of several shards (top.lua); and what puts messages back into a
// damaged segment (a promotion, a retry, an expired lease, RequeueDead) is
// served from it. Purge deletes what waits. (On the base, Peek failed on
// the key a member named, Stats counted it, top.lua said the priority of
// a member's score, and takes passed the segment by.)
func TestRangeIndexDamageFailsNoOtherScript(t *testing.T) {
	c := newClient(t)
	for _, l := range damagedRangeLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			s := sh(q)
			hi, lo := l.prios[0], l.prios[1] // two priorities of the top segment
			lane, _ := l.layout.l.LaneOf(hi)
			damage := []string{s.Keys().Lanes()[lane]}
			for _, b := range noPriority {
				damage = append(damage, b.score, b.member)
			}
			damageIt := func() {
				t.Helper()
				require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", damage...)))
			}
			take := func() *Message {
				t.Helper()
				r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute, guess: true})
				require.NoError(t, err)
				require.Len(t, r.msgs, 1)
				return r.msgs[0]
			}
			for _, id := range []string{"a", "b", "c"} {
				_, err := q.Enqueue(ctx, []byte(id), ID(id), Priority(lo))
				require.NoError(t, err)
			}
			damageIt()
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "RPUSH", s.Keys().Prefix()+"prio:007", "not an envelope")))

			peek, err := q.Peek(ctx, 10)
			assert.NoError(t, err)
			assert.Equal(t, []string{"a", "b", "c"}, infoIDs(peek))
			st, err := q.Stats(ctx)
			assert.NoError(t, err)
			assert.Equal(t, int64(3), st.Ready, "Stats counts no key that no priority names")
			top, err := consume.Top(ctx, s)
			assert.NoError(t, err)
			assert.Equal(t, lo, top, "top.lua: the best priority named, not a score of a member that names none")
			require.NoError(t, q.Cancel(ctx, "b"))
			peek, err = q.Peek(ctx, 10)
			require.NoError(t, err)
			assert.Equal(t, []string{"a", "c"}, infoIDs(peek))

			// A promotion into the damaged segment, then a retry.
			_, err = q.Enqueue(ctx, []byte("d"), ID("d"), Priority(hi), Delay(time.Hour))
			require.NoError(t, err)
			n, _, _, err := s.PromoteAt(ctx, strconv.FormatInt(time.Now().Add(2*time.Hour).UnixMilli(), 10))
			require.NoError(t, err)
			require.Equal(t, 1, n)
			m := take()
			assert.Equal(t, "d", m.ID, "promoted, and served before the others")
			damageIt()
			require.NoError(t, failTok(s, ctx, m.token(), 0, "again", store.FailRetry)) // back at once
			m = take()
			assert.Equal(t, "d", m.ID, "retried")
			assert.Equal(t, 2, m.Attempts)
			require.NoError(t, m.Ack(ctx))

			// An expired lease, swept back.
			damageIt()
			r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: 20 * time.Millisecond, guess: true})
			require.NoError(t, err)
			require.Len(t, r.msgs, 1)
			require.Equal(t, "a", r.msgs[0].ID)
			damageIt()
			require.Eventually(t, func() bool {
				back, _, _, err := s.Sweep(ctx, 10)
				return err == nil && back == 1
			}, 5*time.Second, 10*time.Millisecond)
			m = take()
			assert.Equal(t, "a", m.ID, "swept back")
			assert.Equal(t, 2, m.Attempts)
			require.NoError(t, m.Ack(ctx))

			// A dead letter requeued.
			m = take()
			require.Equal(t, "c", m.ID)
			require.NoError(t, failTok(s, ctx, m.token(), 0, "to requeue", store.FailDead))
			damageIt()
			require.NoError(t, q.RequeueDead(ctx, "c"))
			m = take()
			assert.Equal(t, "c", m.ID, "requeued")
			require.NoError(t, m.Ack(ctx))

			// Purge, the segment damaged again.
			_, err = q.Enqueue(ctx, []byte("e"), Priority(lo))
			require.NoError(t, err)
			damageIt()
			purged, err := q.Purge(ctx)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, purged, int64(1))
			st, err = q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(0), st.Ready)
		})
	}
}

// Open of a Range queue whose meta key was lost looks at its segments to
// tell format 4 from the earlier form (findSortedRange): one member that
// names no priority at the head of a segment of format 4 must not make it
// serve the queue as RangeSorted. Failed on issue 29's base: the names were
// taken as messages of the earlier form and buried, their lists left unread.
func TestRangeQueueWithoutMetaIsNotMistakenForSortedByOneDamagedMember(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{Layout: Range(0, 9, 2)})
	var want []string
	for _, p := range []int64{7, 3} {
		id, err := q.Enqueue(ctx, []byte(fmt.Sprint(p)), Priority(p))
		require.NoError(t, err)
		want = append(want, id)
	}
	p := radix.NewPipeline()
	p.Append(radix.Cmd(nil, "ZADD", sh(q).Keys().Lanes()[1], "-100", "x"))
	p.Append(radix.Cmd(nil, "DEL", sh(q).Keys().Meta())) // a restart without persistence
	require.NoError(t, c.Do(ctx, p))

	again, err := Open(ctx, c, q.Name(), Config{Layout: Range(0, 9, 2)})
	require.NoError(t, err)
	assert.False(t, again.layout().SeqMembers(), "still format 4")
	var format string
	require.NoError(t, c.Do(ctx, radix.Cmd(&format, "HGET", sh(q).Keys().Meta(), "format")))
	assert.Equal(t, "4", format)
	cons := newConsumer(t, again, ConsumerConfig{})
	assert.Equal(t, want, receiveIDs(t, ctx, again, cons, len(want)))
	d := onlyDeadLetter(t, again)
	assert.Contains(t, d.Reason, "names no priority")
}

// With a dead-letter list of the wrong type nothing can be set aside: a
// member that is nothing but a wrong name is dropped, and the segment
// served; one that may be a message (the earlier form) stays where it is,
// and its segment is passed by, as before the fix, reported in the log.
func TestRangeIndexDamageWithDeadLettersOfTheWrongType(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	var logged lockedBuffer
	q := openQueue(t, c, Config{Layout: Range(0, 99, 3), Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	s := sh(q)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "SET", s.Keys().Dead(), "not a list")))
	take := func() []string {
		t.Helper()
		r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute, guess: true})
		require.NoError(t, err)
		var ids []string
		for _, m := range r.msgs {
			ids = append(ids, m.ID)
		}
		return ids
	}
	for _, name := range []string{"high", "low"} {
		p := int64(90)
		if name == "low" {
			p = 10
		}
		_, err := q.Enqueue(ctx, []byte(name), ID(name), Priority(p))
		require.NoError(t, err)
	}
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", s.Keys().Lanes()[2], "-inf", "x", "-1000", "007")))
	assert.Equal(t, []string{"high"}, take(), "wrong names dropped")
	var members []string
	require.NoError(t, c.Do(ctx, radix.Cmd(&members, "ZRANGE", s.Keys().Lanes()[2], "0", "-1")))
	assert.Empty(t, members)

	old := (&store.Envelope{ID: "old-1", CallerID: true, Priority: 95, EnqueuedMs: 1_700_000_000_000, Payload: []byte("earlier")}).Encode()
	member := "\x00\x00\x00\x00\x00\x00\x00\x01" + string(old)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", s.Keys().Lanes()[2], "-95", member)))
	_, err := q.Enqueue(ctx, []byte("beside"), ID("beside"), Priority(80))
	require.NoError(t, err)
	assert.Equal(t, []string{"low"}, take(), "the segment holding what may be a message is passed by")
	require.NoError(t, c.Do(ctx, radix.Cmd(&members, "ZRANGE", s.Keys().Lanes()[2], "0", "-1")))
	assert.Equal(t, []string{member, "80"}, members, "kept")
	assert.Contains(t, logged.String(), s.Keys().Dead())
}

// At maxmemory (noeviction) a take still sets damaged index members aside
// and delivers what is beside them: its first write frees memory (the pop
// of the member, or its ZREM from a filled index's segment), and Redis
// refuses a script only at its first write.
func TestRangeIndexDamageIsSetAsideAtMaxMemory(t *testing.T) {
	addr := ownServer(t, "--maxmemory-policy", "noeviction")
	c := ownPool(t, addr, 8)
	for _, l := range damagedRangeLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			s := sh(q)
			var want []string
			for _, p := range l.prios {
				id, err := q.Enqueue(ctx, []byte(fmt.Sprint(p)), Priority(p))
				require.NoError(t, err)
				want = append(want, id)
			}
			for _, p := range l.prios {
				lane, _ := l.layout.l.LaneOf(p)
				args := []string{s.Keys().Lanes()[lane]}
				for _, b := range noPriority {
					args = append(args, b.score, b.member)
				}
				require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", args...)))
			}
			setMaxMemory(t, c, usedMemory(t, c)-256<<10) // over the limit from here on
			t.Cleanup(func() { setMaxMemory(t, c, 0) })
			_, err := q.Enqueue(ctx, []byte("refused"), Priority(l.prios[0]))
			require.ErrorContains(t, err, "OOM", "Redis is full")

			var got []string
			for range want {
				r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute, guess: true})
				require.NoError(t, err)
				require.Len(t, r.msgs, 1)
				got = append(got, r.msgs[0].ID)
			}
			assert.Equal(t, want, got)
			dead, err := q.DeadLetters(ctx, 0, 1000)
			require.NoError(t, err)
			assert.NotEmpty(t, dead, "set aside")
		})
	}
}
