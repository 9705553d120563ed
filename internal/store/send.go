package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// send.go: how messages are stored. One message ready now with a generated
// id goes without Lua (a pipeline, merged with other such enqueues); one of
// a group through grouped.lua (merged too); everything else, and batches,
// through enqueue.lua.

// DueIn is an Item's Due for a message ready d after the server's now
// (rounded up to the millisecond: never early).
func DueIn(d time.Duration) string { return "+" + fmtInt(leaseMs(d)) }

// DueAt is an Item's Due for a message ready at t (the caller's wall time,
// rounded up to the millisecond).
func DueAt(t time.Time) string { return fmtInt(ceilMs(t)) }

// ScoreOf is the sorted-set score of priority p (an Item's Score in a
// Range).
func ScoreOf(p int64) string { return scoreOf(p) }

// Send stores items in the shard: one round trip, atomic (all are stored
// or, on a Redis error, none), but for a single message ready now with a
// generated id, which is merged with the concurrent enqueues of other
// goroutines (coalesce.go). With Config.WaitReplicas, an error wrapping
// ErrNotReplicated comes with the results: stored, not confirmed.
func (s *Shard) Send(ctx context.Context, items []Item) ([]Result, error) { return s.send(ctx, items) }

func (s *Shard) send(ctx context.Context, ps []Item) ([]Result, error) {
	if s.canSendPlain(ps) {
		return s.sendPlain(ctx, ps[0])
	}
	if len(ps) == 1 && ps[0].Grouped && ps[0].Once.Key == "" {
		// Merged with other callers' enqueues: not one with a unique or
		// debounce key, whose key of the wrong type would fail theirs.
		return s.sendGrouped(ctx, ps[0])
	}
	return s.sendScript(ctx, ps)
}

// sendGrouped stores one message of a group, merged with the single
// enqueues of messages of groups that other goroutines make at the same
// time: one enqueue.lua call for all of them (a group's message needs the
// script: its marker goes into the lane only when its group's list was
// empty). Each gets its own outcome; a failure of the call is each one's.
func (s *Shard) sendGrouped(ctx context.Context, p Item) ([]Result, error) {
	return s.sendMerged(ctx, s.grouped, p, func(ctx context.Context, ps []Item) []plainResult {
		out := make([]plainResult, len(ps))
		send := s.sendGroupedScript
		if slices.ContainsFunc(ps, func(p Item) bool { return p.Caller || p.Due != "" }) {
			send = s.sendScript // ids and delays: enqueue.lua
		}
		res, err := send(ctx, ps)
		for i := range out {
			if i < len(res) {
				out[i] = plainResult{res: res[i], err: res[i].Err}
			}
			if out[i].err == nil {
				out[i].err = err
			}
		}
		return out
	})
}

// sendGroupedScript stores ps, ready messages of groups without ids of the
// caller's, with grouped.lua: one call, atomic, cheaper than enqueue.lua.
func (s *Shard) sendGroupedScript(ctx context.Context, ps []Item) ([]Result, error) {
	keys, ki := s.laneKeys([]string{s.k.counts, s.k.wake}, ps)
	args := make([]string, 0, 3+3*len(ps))
	args = append(args, s.kind(), argYes, strconv.Itoa(len(ps)))
	for i, p := range ps {
		args = append(args, ki[i], p.Score, string(p.Env))
	}
	werr := s.write(ctx, s.eval(groupedScript, nil, keys, args...))
	if werr != nil && !errors.Is(werr, ErrNotReplicated) {
		return nil, fmt.Errorf("prioq: enqueue to %q: %w", s.name, werr)
	}
	out := make([]Result, len(ps))
	for i, p := range ps {
		out[i].ID = p.ID
	}
	if werr != nil {
		return out, fmt.Errorf("prioq: enqueue to %q: %w", s.name, werr)
	}
	return out, nil
}

// laneKeys appends to keys the lane keys ps use, each once, and returns
// them with each message's lane as its 1-based index in them (the scripts'
// KEYS index).
func (s *Shard) laneKeys(keys []string, ps []Item) ([]string, []string) {
	at := make(map[int]string, 4) // lane -> KEYS index
	ki := make([]string, len(ps))
	for i, p := range ps {
		k, ok := at[p.Lane]
		if !ok {
			keys = append(keys, s.k.lanes[p.Lane])
			k = strconv.Itoa(len(keys))
			at[p.Lane] = k
		}
		ki[i] = k
	}
	return keys, ki
}

// sendScript stores ps with enqueue.lua: one call, atomic.
func (s *Shard) sendScript(ctx context.Context, ps []Item) ([]Result, error) {
	keys, ki := s.laneKeys([]string{s.k.ids, s.k.seq, s.k.delayed, s.k.dstore, s.k.sched, s.k.wake, s.k.counts}, ps)
	args := make([]string, 0, 3+8*len(ps))
	args = append(args, s.armFlag(), s.kind(), strconv.Itoa(len(ps)))
	for i, p := range ps {
		caller := argNo
		if p.Caller {
			caller = argYes
		}
		var once string
		keys, once = s.onceField(keys, p.Once)
		args = append(args, p.ID, caller, p.Due, strconv.Itoa(p.Lane),
			ki[i], p.Score, string(p.Env), once)
	}
	var codes []string
	werr := s.write(ctx, s.eval(enqueueScript, &codes, keys, args...))
	if werr != nil && !errors.Is(werr, ErrNotReplicated) {
		return nil, fmt.Errorf("prioq: enqueue to %q: %w", s.name, werr)
	}
	if len(codes) != len(ps) {
		return nil, fmt.Errorf("prioq: enqueue to %q: %w: %d codes for %d messages", s.name, ErrScript, len(codes), len(ps))
	}
	out := make([]Result, len(ps))
	for i, p := range ps {
		out[i].ID = p.ID
		switch c := codes[i]; {
		case c == "0" && p.Once.Key != "" && !p.Once.Debounce:
			out[i].Err = fmt.Errorf("prioq: enqueue %q to %q: unique key %q: %w", p.ID, s.name, p.Once.Key, ErrDuplicate)
			if !p.Caller {
				out[i].ID = "" // generated for a message that was not stored
			}
		case c == "0":
			out[i].Err = fmt.Errorf("prioq: enqueue %q to %q: %w", p.ID, s.name, ErrDuplicate)
		case strings.HasPrefix(c, "="):
			out[i].ID, out[i].Folded = c[1:], true
		}
	}
	if werr != nil {
		return out, fmt.Errorf("prioq: enqueue to %q: %w", s.name, werr)
	}
	return out, nil
}

// onceField appends the key of o, when it has one, to keys and returns
// enqueue.lua's once field for it (lua/inc/once.lua).
func (s *Shard) onceField(keys []string, o Once) ([]string, string) {
	if o.Key == "" {
		return keys, ""
	}
	ms := fmtInt(leaseMs(o.Window))
	if !o.Debounce {
		keys = append(keys, s.k.unique(o.Key))
		return keys, "u " + strconv.Itoa(len(keys)) + " " + ms
	}
	mode := "l"
	if o.First {
		mode = "f"
	}
	keys = append(keys, s.k.debounce(o.Key))
	return keys, "b " + strconv.Itoa(len(keys)) + " " + ms + " " + mode
}

// canSendPlain reports whether a send needs no script: one message, to a
// Levels queue or a Range queue of format 4, ready now (no Delay, no At: the
// server's clock decides when those are due), with a generated id (so there
// is no duplicate to detect). This is the common case, and a Lua call costs
// Redis ~10 µs of fixed overhead that an RPUSH does not. Batches keep the
// script: it makes them atomic and its overhead is shared by the batch.
// (Range queues of earlier formats need the seq counter's next value in
// the member, which only a script can read and write in one step.)
func (s *Shard) canSendPlain(ps []Item) bool {
	return len(ps) == 1 && (!s.isRange() || s.lists()) && !ps[0].Caller && ps[0].Due == "" && !ps[0].Grouped && ps[0].Once.Key == ""
}

// sendPlain stores one ready message of a Levels queue without Lua, merged
// with the single enqueues of other goroutines in flight at the same time
// (see coalescer): one round trip for all of them.
func (s *Shard) sendPlain(ctx context.Context, p Item) ([]Result, error) {
	return s.sendMerged(ctx, s.plain, p, s.sendPlainMany)
}

// sendMerged sends p through coalescer c, which runs run for p and the
// other enqueues merged with it, and returns p's outcome as send does.
func (s *Shard) sendMerged(ctx context.Context, c *coalescer[Item, plainResult], p Item,
	run func(context.Context, []Item) []plainResult) ([]Result, error) {
	r := c.do(ctx, p, run, func(err error) plainResult {
		return plainResult{err: fmt.Errorf("prioq: enqueue to %q: %w", s.name, err)}
	})
	if r.err != nil && r.res.ID == "" {
		return nil, r.err
	}
	return []Result{r.res}, r.err
}

// sendPlainMany stores ready messages of a Levels queue without Lua: one
// RPUSH per lane (atomic by itself, the messages in the order given) and,
// for AtLeastOnce, the wake-up marker (an idempotent ZADD on a one-member set),
// in one pipeline. A pipeline is not a script: Redis judges each command
// alone, so one lane's RPUSH can succeed while another's or the ZADD fails
// (at maxmemory the first RPUSH may be the write that crosses the limit).
// What counts for a message is its lane's RPUSH: when its reply arrived the
// message is stored and its enqueue succeeded, whatever the rest did; a
// wake-up lost that way (or with a connection cut in between) is re-armed by
// the lease sweep.
func (s *Shard) sendPlainMany(ctx context.Context, ps []Item) []plainResult {
	out := make([]plainResult, len(ps))
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
	}
	// A lane's RPUSH refused by a cluster node (its slot moving: MOVED, ASK,
	// TRYAGAIN) stored nothing: its messages go again, alone, after a wait.
	pending := ps
	idx := make([]int, len(ps)) // pending[j] is ps[idx[j]]
	for i := range idx {
		idx[i] = i
	}
	wait := 5 * time.Millisecond
	for {
		redo, redoIdx := s.sendPlainOnce(ctx, pending, idx, out)
		if len(redo) == 0 || !sleepCtx(ctx, wait) {
			return out
		}
		pending, idx, wait = redo, redoIdx, min(2*wait, 100*time.Millisecond)
	}
}

// sendPlainOnce is one pipeline of sendPlainMany. It writes the results of
// ps (out[idx[j]] for ps[j]) and returns the messages whose RPUSH a
// redirect refused, to send again.
func (s *Shard) sendPlainOnce(ctx context.Context, ps []Item, idx []int, out []plainResult) (redo []Item, redoIdx []int) {
	// The list each message goes to, once: its level's, or its priority's
	// (Range), which an index must then name (namedTx): its segment's, or
	// for a level, the filled index when the queue has one.
	dest := make([]string, len(ps))
	byList := make(map[string][]string, 4)
	var order []string // lists in first-use order
	var tx *namedTx    // the pushes, in order, when they are named
	if s.lists() || s.filled() {
		tx = &namedTx{s: s, cmd: "RPUSH"}
	}
	best := ps[0].Priority
	for j, m := range ps {
		l := s.k.lanes[m.Lane]
		var u namedPush
		if tx != nil {
			u = s.namedPush(m.Lane, m.Priority)
			l = u.list
		}
		dest[j] = l
		if byList[l] == nil {
			order = append(order, l)
			if tx != nil {
				tx.pushes = append(tx.pushes, u)
			}
		}
		byList[l] = append(byList[l], string(m.Env))
		best = max(best, m.Priority)
	}
	length := make(map[string]*int64, len(order)) // a list's length after its RPUSH; 0 until its reply arrives
	p := radix.NewPipeline()
	for j, l := range order {
		length[l] = new(int64)
		if tx != nil {
			tx.pushes[j].vals = byList[l]
		} else {
			p.Append(radix.Cmd(length[l], "RPUSH", append([]string{l}, byList[l]...)...))
		}
	}
	if tx != nil {
		tx.appendTo(p)
	}
	// The total for rates (Stats.Enqueued) is counted whatever the RPUSHes
	// did: at maxmemory it may count a message refused (rates, not accounts).
	p.Append(radix.Cmd(nil, "HINCRBY", s.k.counts, countEnqueued, strconv.Itoa(len(ps))))
	armed := int64(-1)   // the wake-up's ZADD reply; -1 until it arrives
	var announced *int64 // SPUBLISH's reply (receivers), when sent
	var arm func() radix.Action
	if s.wakes() {
		// The best priority made ready, for the consumers of a queue of
		// several shards: see lua/inc/wake.lua.
		arm = func() radix.Action {
			return radix.Cmd(&armed, "ZADD", s.k.wake, "LT", fmtInt(-best), wakeMember)
		}
		p.Append(arm())
		// Announce the work for MultiConsumers (internal/consume/multi.go) as arm_wake does
		// in the scripts, in the same round trip: while the last
		// announcement reached a subscriber, and otherwise once a second
		// (to find out), so that a queue nobody listens to pays one command
		// a second, not one a call. A MultiConsumer that subscribes
		// meanwhile finds the work by its probe.
		if now := time.Now().UnixNano(); s.heard.Load() || now >= s.nextAsk.Load() {
			s.nextAsk.Store(now + int64(time.Second))
			announced = new(int64)
			*announced = -1
			p.Append(radix.Cmd(announced, "SPUBLISH", s.k.wake, announceReady))
		}
	}
	err, notRepl := s.writeWait(ctx, p)
	// (Replies are read only after a reply: an abandoned call may still
	// write them.)
	if arm != nil && isRedirect(err) && armed < 0 && slices.ContainsFunc(order, func(l string) bool { return *length[l] > 0 }) {
		// Messages were stored but a cluster node refused the wake-up (its
		// key had moved on while the lanes had not): set it again, or idle
		// consumers would not hear of them. The enqueue stands either way.
		_ = s.do(ctx, arm())
	}
	if announced != nil && err == nil {
		s.heard.Store(*announced > 0)
	}
	if announced != nil && *announced < 0 && isNoPerm(err) && s.pubRefused.CompareAndSwap(false, true) {
		// The enqueue stands (a hint was refused); say once why a
		// MultiConsumer hears nothing of this queue.
		s.cfg.Logger.WarnContext(ctx, "prioq: the Redis user may not announce work (SPUBLISH refused): a MultiConsumer "+
			"serving this queue finds its work by its probe, within ProbeInterval, instead of at once; grant +spublish and "+
			"the shard channels &prioq:* and &prioq/*. Said once", "queue", s.name, "error", err)
	}
	listErr := make(map[string]error) // Range: why a list's messages were not stored
	if tx != nil {
		lengths, errs := tx.results(ctx, err)
		for j, l := range order {
			*length[l], listErr[l] = lengths[j], errs[j]
		}
	}
	for j, m := range ps {
		i := idx[j]
		if lerr := listErr[dest[j]]; lerr != nil {
			out[i].err = fmt.Errorf("prioq: enqueue to %q: %w", s.name, lerr)
			continue
		}
		if err != nil && !(isReply(err) && *length[dest[j]] > 0) {
			if isRedirect(err) {
				redo, redoIdx = append(redo, m), append(redoIdx, i)
			}
			out[i].err = fmt.Errorf("prioq: enqueue to %q: %w", s.name, err)
			continue
		}
		// Stored: what another command of the pipeline did (a wake-up or a
		// total refused, another caller's lane) is not this enqueue's error.
		out[i] = plainResult{res: Result{ID: m.ID}}
		if notRepl != nil {
			out[i].err = fmt.Errorf("prioq: enqueue to %q: %w", s.name, notRepl)
		}
	}
	return redo, redoIdx
}
