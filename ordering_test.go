package prioq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit"
	"github.com/prioq/prioq/internal/testkit/require"
)

// refQueue is the in-memory reference the property test checks Redis against:
// a message becomes ready with the next sequence number (on enqueue, or on
// promotion in (due time, enqueue order) order, whatever the ids); a take
// serves the highest non-empty lane, and inside it the highest priority, then
// the lowest sequence number.
type refQueue struct {
	layout  Layout
	ready   []refItem
	delayed []refItem
	seq     int
	sched   int // enqueue order of delayed messages
}

type refItem struct {
	id    string
	prio  int64
	lane  int
	seq   int
	due   int64
	sched int
}

func (r *refQueue) add(it refItem) {
	r.seq++
	it.seq = r.seq
	r.ready = append(r.ready, it)
}

func (r *refQueue) promote(now int64) {
	var due []refItem
	keep := r.delayed[:0]
	for _, it := range r.delayed {
		if it.due <= now {
			due = append(due, it)
		} else {
			keep = append(keep, it)
		}
	}
	r.delayed = keep
	slices.SortFunc(due, func(a, b refItem) int {
		if a.due != b.due {
			return int(a.due - b.due)
		}
		return a.sched - b.sched
	})
	for _, it := range due {
		r.add(it)
	}
}

// take removes and returns up to k items, all from the highest non-empty lane.
// take removes what a take of k returns: the highest lane's messages in
// order; with acrossLanes (AtLeastOnce, whose take fills from lane after
// lane) then the next lanes' until k.
func (r *refQueue) take(k int, acrossLanes bool) []string {
	var ids []string
	for len(ids) < k && len(r.ready) > 0 {
		top := -1
		for _, it := range r.ready {
			top = max(top, it.lane)
		}
		var lane []refItem
		for _, it := range r.ready {
			if it.lane == top {
				lane = append(lane, it)
			}
		}
		slices.SortFunc(lane, func(a, b refItem) int {
			if a.prio != b.prio {
				if a.prio > b.prio {
					return -1
				}
				return 1
			}
			return a.seq - b.seq
		})
		if len(lane) > k-len(ids) {
			lane = lane[:k-len(ids)]
		}
		for _, it := range lane {
			ids = append(ids, it.id)
			r.remove(it.id)
		}
		if !acrossLanes {
			break
		}
	}
	return ids
}

func (r *refQueue) remove(id string) bool {
	for i, it := range r.ready {
		if it.id == id {
			r.ready = slices.Delete(r.ready, i, i+1)
			return true
		}
	}
	for i, it := range r.delayed {
		if it.id == id {
			r.delayed = slices.Delete(r.delayed, i, i+1)
			return true
		}
	}
	return false
}

// priorityGen draws priorities that stress a layout: both ends, the edges of
// every segment, a few "hot" values that repeat (FIFO ties), and uniform ones.
func priorityGen(rng *rand.Rand, l Layout) func() int64 {
	if !l.l.IsRange() {
		return func() int64 { return rng.Int64N(int64(l.l.Lanes())) }
	}
	special := []int64{l.l.Lowest(), l.l.Lowest() + 1, l.l.Highest(), l.l.Highest() - 1, 0, -1, 1}
	for s := 0; s < l.l.Lanes(); s++ {
		// the first priority of segment s, and the one just below it
		p := l.l.Lowest()
		for lo, hi := l.l.Lowest(), l.l.Highest(); lo <= hi; {
			mid := lo + (hi-lo)/2
			if seg, _ := l.l.LaneOf(mid); seg >= s {
				p, hi = mid, mid-1
			} else {
				lo = mid + 1
			}
		}
		special = append(special, p, max(p-1, l.l.Lowest()))
	}
	var hot []int64
	for i := 0; i < 6; i++ {
		hot = append(hot, l.l.Lowest()+rng.Int64N(l.l.Highest()-l.l.Lowest()+1))
	}
	return func() int64 {
		var p int64
		switch rng.IntN(3) {
		case 0:
			p = special[rng.IntN(len(special))]
		case 1:
			p = hot[rng.IntN(len(hot))]
		default:
			p = l.l.Lowest() + rng.Int64N(l.l.Highest()-l.l.Lowest()+1)
		}
		return min(max(p, l.l.Lowest()), l.l.Highest())
	}
}

func TestOrderingProperty(t *testing.T) {
	const ops = 2500
	c := newClient(t)
	layouts := []struct {
		name   string
		layout Layout
	}{
		{"Levels5", Levels(5)},
		{"Levels64", Levels(64)},
		{"Range2^53", Range(-MaxRangePriority, MaxRangePriority, 64)},
		{"RangeSmall", Range(-50, 50, 7)},
		{"RangeOneSegment", Range(-(1 << 40), 1<<40, 1)},
		{"RangeSorted2^53", RangeSorted(-MaxRangePriority, MaxRangePriority, 64)},
		{"RangeSortedSmall", RangeSorted(-50, 50, 7)},
	}
	for _, m := range bothModes {
		for _, l := range layouts {
			t.Run(m.name+"/"+l.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(testkit.Seed(t), 7))
				runOrderingProperty(t, c, m.mode, l.layout, rng, ops)
			})
		}
	}
}

func runOrderingProperty(t *testing.T, c Client, mode Mode, layout Layout, rng *rand.Rand, ops int) {
	ctx := ctxT(t, 2*time.Minute)
	q := openQueue(t, c, Config{Layout: layout, Mode: mode, PromoteBatch: 5})
	cons := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	ref := &refQueue{layout: layout}
	prio := priorityGen(rng, layout)
	// Delayed messages are due a day from now in virtual time, so only the
	// test's promote calls (with a virtual clock) make them ready.
	base := time.Now().Add(24 * time.Hour).UnixMilli()
	var virtual int64
	var callerN int
	var received int

	item := func() (EnqueueItem, refItem) {
		p := prio()
		lane, err := layout.l.LaneOf(p)
		require.NoError(t, err)
		it := refItem{prio: p, lane: lane}
		opts := []Option{Priority(p)}
		if rng.IntN(4) == 0 {
			// Ids whose byte order is not their enqueue order: the delayed
			// set must not serve equal due times by id.
			callerN++
			it.id = strconv.Itoa(rng.IntN(1000)) + "-" + strconv.Itoa(callerN)
			opts = append(opts, ID(it.id))
		}
		if rng.IntN(3) == 0 {
			// Few distinct due times, so that many messages share one.
			it.due = base + virtual + 20*rng.Int64N(15)
			opts = append(opts, At(time.UnixMilli(it.due)))
		}
		return EnqueueItem{Payload: []byte(fmt.Sprint(p)), Options: opts}, it
	}
	record := func(it refItem, id string) {
		it.id = id
		if it.due > 0 {
			ref.sched++
			it.sched = ref.sched
			ref.delayed = append(ref.delayed, it)
		} else {
			ref.add(it)
		}
	}

	for op := 0; op < ops; op++ {
		switch r := rng.IntN(100); {
		case r < 35: // enqueue one
			in, it := item()
			id, err := q.Enqueue(ctx, in.Payload, in.Options...)
			require.NoError(t, err)
			record(it, id)
		case r < 45: // enqueue a batch
			n := 1 + rng.IntN(8)
			items := make([]EnqueueItem, n)
			refs := make([]refItem, n)
			for i := range items {
				items[i], refs[i] = item()
			}
			res, err := q.EnqueueBatch(ctx, items)
			require.NoError(t, err)
			for i, r := range res {
				require.NoError(t, r.Err)
				record(refs[i], r.ID)
			}
		case r < 55: // advance the virtual clock and promote
			virtual += rng.Int64N(120)
			promoteAllAt(t, q, base+virtual)
			ref.promote(base + virtual)
		case r < 60: // cancel a waiting message, ready or delayed
			all := append(append([]refItem(nil), ref.ready...), ref.delayed...)
			if len(all) == 0 {
				continue
			}
			id := all[rng.IntN(len(all))].id
			require.NoError(t, q.Cancel(ctx, id), "cancel %s", id)
			ref.remove(id)
		default: // take one or a batch, when the reference says something is ready
			if len(ref.ready) == 0 {
				continue
			}
			k := 1
			if rng.IntN(4) == 0 {
				k = 2 + rng.IntN(6)
			}
			// (AtMostOnce on a Range queue of format 4 takes with
			// take.lua too.)
			want := ref.take(k, mode == AtLeastOnce || sh(q).Lists())
			got, err := cons.ReceiveBatch(ctx, k)
			require.NoError(t, err)
			gotIDs := make([]string, len(got))
			for i, m := range got {
				gotIDs[i] = m.ID
			}
			require.Equal(t, want, gotIDs, "op %d: take %d", op, k)
			received += len(got)
			if mode == AtLeastOnce {
				for _, err := range AckBatch(ctx, got...) {
					require.NoError(t, err)
				}
			}
		}
	}
	// Drain: promote everything and take it all, still in reference order.
	virtual += 1000
	promoteAllAt(t, q, base+virtual)
	ref.promote(base + virtual)
	for len(ref.ready) > 0 {
		want := ref.take(1, false)
		got, err := cons.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, want[0], got.ID)
		received++
		if mode == AtLeastOnce {
			require.NoError(t, got.Ack(ctx))
		}
	}
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Ready+st.Delayed+st.InFlight)
	t.Logf("%d ops, %d messages received in exactly the reference order", ops, received)
}

// promoteAllAt promotes everything due at ms (virtual time), batch after batch.
func promoteAllAt(t *testing.T, q *Queue, ms int64) {
	t.Helper()
	for {
		moved, _, _, err := sh(q).PromoteAt(context.Background(), fmtInt(ms))
		require.NoError(t, err)
		if moved < q.cfg.PromoteBatch {
			return
		}
	}
}
