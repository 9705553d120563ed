package prioq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// The tests of this file come from the review of issue 29 (groups and
// limits); each failed on a9967a7, the code it reviewed.

// keysOf lists every key of q's one shard that exists, found by SCAN of its
// prefix (group lists, gleases:G, glog:G and prio:P included), meta aside.
func keysOf(t *testing.T, c radix.Client, q *Queue) []string {
	t.Helper()
	var out []string
	s := (radix.ScannerConfig{Command: "SCAN", Pattern: scanPattern(sh(q).Keys().Prefix()) + "*", Count: 1000}).New(c)
	var k string
	for s.Next(context.Background(), &k) {
		if k != sh(q).Keys().Meta() {
			out = append(out, k)
		}
	}
	require.NoError(t, s.Close())
	return out
}

// scanPattern escapes the glob characters of a key prefix.
func scanPattern(p string) string {
	var b []byte
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '*', '?', '[', ']', '\\':
			b = append(b, '\\')
		}
		b = append(b, p[i])
	}
	return string(b)
}

// SetGroupLimit on a RangeSorted queue, which cannot hold a group's
// messages, is refused and writes nothing. Before: it wrote glimits.
func TestGroupLimitOnRangeSortedIsRefused(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: RangeSorted(0, 99, 3)})
	err := q.SetGroupLimit(ctx, "g", GroupLimit{Concurrency: 2})
	assert.ErrorIs(t, err, ErrInvalidOption)
	err = q.SetGroupLimit(ctx, "", GroupLimit{Rate: Rate{N: 5, Per: time.Second}})
	assert.ErrorIs(t, err, ErrInvalidOption)
	assert.Empty(t, keysOf(t, c, q), "nothing written")
}

// takeN leases up to n messages of s (highest lanes first) for lease.
func takeN(t *testing.T, ctx context.Context, s *store.Shard, n int, lease time.Duration) []*Message {
	t.Helper()
	msgs, _, err := shardTake(s, ctx, s.Keys().HighFirst(), n, lease)
	require.NoError(t, err)
	return msgs
}

func payloads(msgs []*Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Payload))
	}
	return out
}

// At maxmemory a group parked at its concurrency limit comes back by every
// path that ends a lease (an ack with a caller id, a pipelined ack, the sweep
// of an expired lease) and by SetGroupLimit raising the limit: each puts the
// markers back after a write that frees memory. Before: unpark.lua's first
// write was the marker's RPUSH, refused (OOM), and SetGroupLimit's an HSET:
// the group's messages waited until the limit was removed.
func TestGroupParkedAtMaxMemoryComesBack(t *testing.T) {
	addr := ownServer(t, "--maxmemory-policy", "noeviction")
	c := ownPool(t, addr, 8)
	for _, l := range groupLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			s := sh(q)
			require.NoError(t, q.SetGroupLimit(ctx, "A", GroupLimit{Concurrency: 1}))
			for i := range 6 {
				opts := []Option{Priority(l.prio), Group("A")}
				if i < 2 {
					opts = append(opts, ID(fmt.Sprint("a", i))) // acked by ack.lua
				}
				_, err := q.Enqueue(ctx, []byte(fmt.Sprint("A", i)), opts...)
				require.NoError(t, err)
			}
			var got []string
			// next takes the group's next message and checks that the one
			// after it waits (parked at the limit).
			next := func(lease time.Duration) *Message {
				t.Helper()
				m := takeN(t, ctx, s, 1, lease)
				require.Len(t, m, 1, "the group came back (after %v)", got)
				got = append(got, string(m[0].Payload))
				require.Empty(t, takeN(t, ctx, s, 1, time.Hour), "parked at its limit")
				return m[0]
			}
			m := next(time.Hour)

			setMaxMemory(t, c, usedMemory(t, c)-256<<10)
			t.Cleanup(func() { setMaxMemory(t, c, 0) })
			_, err := q.Enqueue(ctx, []byte("refused"), Priority(l.prio), Group("A"))
			require.ErrorContains(t, err, "OOM", "Redis is full")

			require.NoError(t, m.Ack(ctx)) // caller id: ack.lua
			m = next(time.Hour)
			require.NoError(t, m.Ack(ctx)) // caller id
			m = next(time.Hour)
			require.NoError(t, m.Ack(ctx)) // generated id: the pipeline, then unpark.lua
			m = next(200 * time.Millisecond)
			time.Sleep(250 * time.Millisecond) // its lease expires
			back, _, _, err := s.Sweep(ctx, 100)
			require.NoError(t, err, "sweep at maxmemory")
			require.Equal(t, 1, back)
			m = next(time.Hour)
			assert.Equal(t, "A3", got[len(got)-1], "the expired one again")
			// Raising the limit at maxmemory puts the group back at once.
			require.NoError(t, q.SetGroupLimit(ctx, "A", GroupLimit{Concurrency: 3}), "SetGroupLimit at maxmemory")
			more := takeN(t, ctx, s, 3, time.Hour)
			got = append(got, payloads(more)...)
			require.NoError(t, m.Ack(ctx))
			for _, m := range more {
				require.NoError(t, m.Ack(ctx))
			}
			assert.Equal(t, []string{"A0", "A1", "A2", "A3", "A3", "A4", "A5"}, got)
			setMaxMemory(t, c, 0)
			gs, err := q.Groups(ctx, 0)
			require.NoError(t, err)
			assert.Empty(t, gs, "nothing left")
			lim, _ := store.ParseLimit(hget(t, c, s.Keys().GLimits(), "A"))
			assert.Equal(t, 3, lim, "the raised limit is stored")
		})
	}
}

func hget(t *testing.T, c radix.Client, key, field string) string {
	t.Helper()
	var v string
	require.NoError(t, c.Do(context.Background(), radix.Cmd(&v, "HGET", key, field)))
	return v
}

// A parked entry that does not parse (a hand edit, a bug) is set aside in
// the dead letters, with the reason, before anything is written, and the
// group's good entries go on: an ack, the sweep, Cancel and Purge all work.
// Before: Range "1|x" made a caller-id Ack fail after the ack happened and
// every later sweep fail after its own writes; Levels "7|" in Levels(3)
// pushed the marker into lane:7, which no take reads.
func TestGroupDamagedParkEntriesAreSetAside(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout Layout
		prio   int64
		bad    string
	}{
		{"Levels/lane-out-of-range", Levels(3), 1, "7|"},
		{"Levels/score", Levels(3), 1, "1|5"},
		{"Levels/no-lane", Levels(3), 1, "x|"},
		{"Range/score-not-a-number", Range(-10, 10, 3), 5, "1|x"},
		{"Range/score-too-big", Range(-10, 10, 3), 5, "2|-99999999999999999999999"},
		{"Range/no-score", Range(-10, 10, 3), 5, "2|"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: tc.layout})
			s := sh(q)
			require.NoError(t, q.SetGroupLimit(ctx, "g", GroupLimit{Concurrency: 1}))
			for i := range 3 {
				_, err := q.Enqueue(ctx, []byte(fmt.Sprint("g", i)), Priority(tc.prio), Group("g"), ID(fmt.Sprint("c", i)))
				require.NoError(t, err)
			}
			m0 := takeN(t, ctx, s, 1, time.Hour)
			require.Len(t, m0, 1)
			require.Empty(t, takeN(t, ctx, s, 1, time.Hour), "parked")
			good := hget(t, c, s.Keys().GPark(), "g")
			require.NotEmpty(t, good)
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", s.Keys().GPark(), "g", good+" "+tc.bad)))

			require.NoError(t, q.Cancel(ctx, "c2"), "cancel reads the parked entries")
			require.NoError(t, m0[0].Ack(ctx), "a caller-id ack puts the group back")
			m1 := takeN(t, ctx, s, 2, time.Hour)
			assert.Equal(t, []string{"g1"}, payloads(m1), "the good entry came back")
			dead := onlyDeadLetter(t, q)
			assert.Contains(t, dead.Reason, "corrupt parked entry of group g")
			assert.Equal(t, tc.bad, string(dead.Raw))
			_, _, _, err := s.Sweep(ctx, 100)
			require.NoError(t, err)
			var lane7 int
			require.NoError(t, c.Do(ctx, radix.Cmd(&lane7, "EXISTS", s.Keys().Prefix()+"lane:7")))
			assert.Zero(t, lane7, "no marker where no take looks")
			require.NoError(t, m1[0].Ack(ctx))

			// The sweep's repair (a parked group without leases) sets a bad
			// entry aside the same way, and so does the next sweep nothing.
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", s.Keys().GPark(), "g", tc.bad)))
			_, dead2, _, err := s.Sweep(ctx, 100)
			require.NoError(t, err)
			assert.Equal(t, 1, dead2, "reported as dead-lettered")
			assert.Equal(t, "", hget(t, c, s.Keys().GPark(), "g"))
			_, _, _, err = s.Sweep(ctx, 100)
			require.NoError(t, err)
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "HSET", s.Keys().GPark(), "g", tc.bad)))
			_, err = q.Purge(ctx)
			require.NoError(t, err, "purge reads the parked entries")
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(0), st.Ready)
			assert.Equal(t, int64(2), st.Dead)
		})
	}
}

// An expired message of a group is delivered again ahead of the newer
// messages of its priority, as one without a group is (README, Guarantees):
// the sweep moves its group's marker to the head of the lane, or puts it
// back there when the group was parked at its limit. Before: it came at
// its group's next turn, behind them (A, B, G0, G1).
func TestGroupExpiredMessageComesBackFirst(t *testing.T) {
	for _, l := range groupLayouts {
		for _, limited := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/limited=%v", l.name, limited), func(t *testing.T) {
				c := newClient(t)
				ctx := ctxT(t, 20*time.Second)
				q := openQueue(t, c, Config{Layout: l.layout})
				s := sh(q)
				if limited {
					require.NoError(t, q.SetGroupLimit(ctx, "G", GroupLimit{Concurrency: 1}))
				}
				enqueueGroup(t, ctx, q, 2, l.prio, "G") // G0, G1
				for _, p := range []string{"A", "B"} {
					_, err := q.Enqueue(ctx, []byte(p), Priority(l.prio))
					require.NoError(t, err)
				}
				// G0 is taken: G's marker goes to the tail, behind A and B.
				lease := 300 * time.Millisecond
				require.Equal(t, []string{"G0"}, payloads(takeN(t, ctx, s, 1, lease)))
				want := []string{"G/G0", "-/A", "-/B", "G/G1"}
				if limited {
					// The next take takes A and B and meets G's marker at
					// its limit (parked); every lease expires, and they come
					// back in the order they were taken.
					require.Equal(t, []string{"A", "B"}, payloads(takeN(t, ctx, s, 3, lease)))
				}
				time.Sleep(lease + 50*time.Millisecond)
				back, _, _, err := s.Sweep(ctx, 100)
				require.NoError(t, err)
				require.Equal(t, map[bool]int{false: 1, true: 3}[limited], back)
				cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
				assert.Equal(t, want, receiveAll(t, ctx, cons))
			})
		}
	}
}

// The exception (README): of several expired messages of one group, the
// first comes back at once and the others at the group's next turns, one
// per round as groups are served, so behind a message enqueued after they
// were taken (C here).
func TestGroupSeveralExpiredOfOneGroupTakeTheirTurns(t *testing.T) {
	for _, l := range groupLayouts {
		t.Run(l.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			s := sh(q)
			enqueueGroup(t, ctx, q, 3, l.prio, "G") // G0, G1, G2
			for _, p := range []string{"A", "B"} {
				_, err := q.Enqueue(ctx, []byte(p), Priority(l.prio))
				require.NoError(t, err)
			}
			lease := 300 * time.Millisecond
			require.Equal(t, []string{"G0"}, payloads(takeN(t, ctx, s, 1, lease)))
			require.Equal(t, []string{"A", "B", "G1"}, payloads(takeN(t, ctx, s, 3, lease)))
			_, err := q.Enqueue(ctx, []byte("C"), Priority(l.prio))
			require.NoError(t, err)
			time.Sleep(lease + 50*time.Millisecond)
			back, _, _, err := s.Sweep(ctx, 100)
			require.NoError(t, err)
			require.Equal(t, 4, back)
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			assert.Equal(t, []string{"G/G0", "-/A", "-/B", "-/C", "G/G1", "G/G2"}, receiveAll(t, ctx, cons))
		})
	}
}

// Close's give-back (release.lua) puts a message of a group back at the
// head the same way: first of its priority, not at its group's next turn.
func TestGroupReleasedMessageComesBackFirst(t *testing.T) {
	for _, l := range groupLayouts {
		t.Run(l.name, func(t *testing.T) {
			c := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			s := sh(q)
			enqueueGroup(t, ctx, q, 2, l.prio, "G")
			_, err := q.Enqueue(ctx, []byte("A"), Priority(l.prio))
			require.NoError(t, err)
			held := takeN(t, ctx, s, 1, time.Hour) // G's marker goes behind A
			require.Equal(t, []string{"G0"}, payloads(held))
			n, err := s.Release(ctx, []string{held[0].token()})
			require.NoError(t, err)
			require.Equal(t, 1, n)
			cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			assert.Equal(t, []string{"G/G0", "-/A", "G/G1"}, receiveAll(t, ctx, cons))
		})
	}
}

// Purge of a Range queue whose groups each hold one message at a priority
// of its own costs O(messages), and leaves no key of the queue behind (the
// totals for rates aside). Before: O(priorities x groups): at 3,000 groups
// the script built 9 million key names and ran past lua-time-limit (5 s):
// the Purge missed its deadline while Redis answered others BUSY.
func TestGroupPurgeIsLinear(t *testing.T) {
	addr := ownServer(t)
	c := ownPool(t, addr, 4)
	ctx := ctxT(t, 60*time.Second)
	const groups = 3000
	q := openQueue(t, c, Config{Layout: Range(-groups, groups, 8)})
	// One group parked at its limit: its list is found through gpark.
	require.NoError(t, q.SetGroupLimit(ctx, "parked", GroupLimit{Concurrency: 1}))
	enqueueGroup(t, ctx, q, 2, groups, "parked")
	require.Len(t, takeN(t, ctx, sh(q), 1, time.Hour), 1)
	require.Empty(t, takeN(t, ctx, sh(q), 1, time.Hour), "parked")
	for start := 0; start < groups; start += 1000 {
		items := make([]EnqueueItem, 0, 1000)
		for i := start; i < start+1000; i++ {
			opts := []Option{Priority(int64(i - groups/2)), Group(fmt.Sprint("tenant-", i))}
			if i%3 == 0 {
				opts = append(opts, ID(fmt.Sprint("id-", i)))
			}
			items = append(items, EnqueueItem{Payload: []byte("x"), Options: opts})
		}
		_, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
	}
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(groups+1), st.Ready)

	pctx, cancel := context.WithTimeout(ctx, 5*time.Second) // lua-time-limit
	start := time.Now()
	n, err := q.Purge(pctx)
	cancel()
	require.NoError(t, err, "Purge within lua-time-limit")
	t.Logf("Purge of %d messages in %d groups: %v", n, groups, time.Since(start))
	assert.Equal(t, st.Ready, n)
	var left []string
	for _, k := range keysOf(t, c, q) {
		rest := k[len(sh(q).Keys().Prefix()):]
		switch {
		case rest == "counts" || rest == "glimits" || rest == "leases" || rest == "inflight" ||
			rest == "gflight" || rest == "gleases:parked" || rest == "wake":
			// Kept by design: totals, limits, what is in flight (the
			// parked group's first message) and the wake-up.
		default:
			left = append(left, rest)
		}
	}
	assert.Empty(t, left, "every waiting message's keys are gone")
	// What is in flight stays, and is all that is left once acked.
	st, err = q.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.Ready)
	assert.Equal(t, int64(1), st.InFlight)
}

// Queue.Groups counts each group's messages in flight from its leases,
// with and without groups, as leases end by every path (an ack, an expiry
// swept, an Extend past the take's lease), and reads no message to do it.
// Before: it copied every in-flight record, payload included, into Lua
// (500 messages of 256 KiB: 0.6 s and ~170 MB of Lua heap).
func TestGroupsCountInFlightFromLeases(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	s := sh(q)
	_, err := q.Enqueue(ctx, []byte("plain"), Priority(2))
	require.NoError(t, err)
	require.Len(t, takeN(t, ctx, s, 1, time.Hour), 1)
	gs, err := q.Groups(ctx, 0)
	require.NoError(t, err)
	assert.Empty(t, gs, "no group: nothing in flight counts")

	enqueueGroup(t, ctx, q, 3, 1, "A")
	enqueueGroup(t, ctx, q, 2, 1, "B")
	enqueueGroup(t, ctx, q, 1, 0, "C")
	long := takeN(t, ctx, s, 3, time.Hour)             // A0, B0, A1
	short := takeN(t, ctx, s, 2, 300*time.Millisecond) // B1, A2
	ext := takeN(t, ctx, s, 1, 300*time.Millisecond)   // C0
	require.Equal(t, []string{"A0", "B0", "A1", "B1", "A2", "C0"}, payloads(append(append(long, short...), ext...)))
	gs, err = q.Groups(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, []GroupStats{{Group: "A", InFlight: 3}, {Group: "B", InFlight: 2}, {Group: "C", InFlight: 1}}, gs)

	require.NoError(t, long[0].Ack(ctx)) // A0
	require.NoError(t, ext[0].Extend(ctx, time.Hour))
	time.Sleep(400 * time.Millisecond) // B1 and A2 expire; C0 was extended
	back, _, _, err := s.Sweep(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 2, back)
	gs, err = q.Groups(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, []GroupStats{{Group: "A", Ready: 1, InFlight: 1}, {Group: "B", Ready: 1, InFlight: 1}, {Group: "C", InFlight: 1}}, gs)

	// Every lease ended: the groups leave the figures. The sweep drops a
	// group from gflight once the lease time its takes gave has passed
	// (D's), and keeps one whose time has not (A's hour) or that an Extend
	// moved (C's).
	enqueueGroup(t, ctx, q, 1, 0, "D")
	rest := takeN(t, ctx, s, 10, 200*time.Millisecond)
	require.Equal(t, []string{"B1", "A2", "D0"}, payloads(rest)) // (expired: in the order taken)
	for _, m := range append(append(rest, long[1:]...), ext...) {
		require.NoError(t, m.Ack(ctx))
	}
	gs, err = q.Groups(ctx, 0)
	require.NoError(t, err)
	assert.Empty(t, gs)
	time.Sleep(250 * time.Millisecond)
	_, _, _, err = s.Sweep(ctx, 100)
	require.NoError(t, err)
	var flying []string
	require.NoError(t, c.Do(ctx, radix.Cmd(&flying, "ZRANGE", s.Keys().GFlight(), "0", "-1")))
	assert.Equal(t, []string{"A", "B", "C"}, flying)
}

// luaMemory is the memory of the server's Lua VM (used_memory_vm_eval, or
// used_memory_lua where that is all there is).
func luaMemory(t *testing.T, c radix.Client) int {
	t.Helper()
	if v := infoValue(t, c, "memory", "used_memory_vm_eval"); v != "" {
		return infoInt(t, c, "memory", "used_memory_vm_eval")
	}
	return infoInt(t, c, "memory", "used_memory_lua")
}

func TestGroupsReadsNoPayload(t *testing.T) {
	addr := ownServer(t)
	c := ownPool(t, addr, 4)
	ctx := ctxT(t, 60*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	const n, size = 200, 256 << 10
	payload := make([]byte, size)
	for i := 0; i < n; i += 20 {
		items := make([]EnqueueItem, 20)
		for j := range items {
			var opts []Option
			if j%2 == 0 {
				opts = append(opts, Group(fmt.Sprint("g", j%4)))
			}
			items[j] = EnqueueItem{Payload: payload, Options: opts}
		}
		_, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
	}
	for got := 0; got < n; {
		m := takeN(t, ctx, sh(q), 50, time.Hour)
		require.NotEmpty(t, m)
		got += len(m)
	}
	_, err := q.Groups(ctx, 0) // the script loaded
	require.NoError(t, err)
	before := luaMemory(t, c)
	start := time.Now()
	gs, err := q.Groups(ctx, 0)
	require.NoError(t, err)
	took := time.Since(start)
	after := luaMemory(t, c)
	t.Logf("Groups with %d MB in flight: %v, Lua memory %d -> %d bytes", n*size>>20, took, before, after)
	var inflight int64
	for _, g := range gs {
		inflight += g.InFlight
	}
	assert.Equal(t, int64(n/2), inflight)
	assert.Less(t, after-before, n*size/10, "the payloads did not go through Lua")
}
