package prioq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// Option varies one Enqueue: Priority, Delay, At, ID, OrderingKey, Headers.
type Option func(*sendOptions)

type sendOptions struct {
	priority    int64
	hasPriority bool
	delay       time.Duration
	at          time.Time
	id          string
	orderingKey string
	group       string
	headers     map[string]string
	err         error
}

// OrderingKey puts the message in the shard of key (a queue of several
// shards): messages with the same key keep first-in, first-out order among
// those of one priority, as in a queue of one shard. Without it a message
// goes to the shard of its ID, or the next shard in turn. With an ID too, on
// a queue of several shards, the enqueue is refused (ErrInvalidOption,
// nothing written): the key would choose the shard, and an id is kept
// unique only within its shard, so one id enqueued with two keys would be
// stored twice (see ID). No effect on a queue of one shard. An empty key is
// an error.
func OrderingKey(key string) Option {
	return func(o *sendOptions) {
		if key == "" {
			o.err = fmt.Errorf("%w: empty ordering key", ErrInvalidOption)
		}
		o.orderingKey = key
	}
}

// Headers adds string headers to the message: metadata carried beside the
// payload through delays, retries, redeliveries and dead letters (trace
// context, a tenant, a content type). Several Headers options merge; a later
// value of a key wins. Limits: MaxHeaders, MaxHeaderKey, MaxHeaderBytes
// (ErrInvalidHeader). A message with headers is stored in envelope version
// 2, which prioq before headers cannot read.
func Headers(h map[string]string) Option {
	return func(o *sendOptions) {
		if len(h) == 0 {
			return
		}
		if o.headers == nil {
			o.headers = make(map[string]string, len(h))
		}
		for k, v := range h {
			o.headers[k] = v
		}
	}
}

// Priority sets the message's priority; higher is served first. Without it a
// message gets 0, or the range's lowest priority when 0 is outside the range.
func Priority(p int64) Option {
	return func(o *sendOptions) { o.priority, o.hasPriority = p, true }
}

// Delay makes the message ready d from now, by the Redis server's clock (a
// producer whose clock is wrong does not make it early or late). A delay of 0
// means ready now; a negative delay is an error.
func Delay(d time.Duration) Option {
	return func(o *sendOptions) {
		if d < 0 {
			o.err = fmt.Errorf("%w: negative delay %v", ErrInvalidOption, d)
		}
		o.delay = d
	}
}

// At makes the message ready at t: the caller's wall time, compared with the
// Redis server's clock. A time in the past means ready now.
func At(t time.Time) Option {
	return func(o *sendOptions) { o.at = t }
}

// ID gives the message an id of the producer's choosing (1..128 printable ASCII
// bytes). While a message with that id is alive (waiting, in flight, or dead),
// enqueueing the id again stores nothing and reports ErrDuplicate, so a
// producer can retry safely: give the ID on the first attempt. On a queue of
// several shards the id chooses its shard, whose set of live ids keeps it
// unique queue-wide; with a Group or an OrderingKey, which would choose the
// shard instead, it is refused (ErrInvalidOption, nothing written): no
// atomic check can see every shard (their keys are in different cluster
// slots), so the same id could be stored in two. Without it
// prioq generates a unique, time-ordered id ('@' and 20 characters of 0-9a-v);
// an id of that form is refused here (ErrInvalidID), so a caller's id can
// never name a message prioq named.
func ID(id string) Option {
	return func(o *sendOptions) {
		if err := validateCallerID(id); err != nil {
			o.err = err
		}
		o.id = id
	}
}

// EnqueueItem is one message of an EnqueueBatch: what Enqueue takes as
// arguments.
type EnqueueItem struct {
	// Payload is the message body (1 byte to Config.MaxPayload).
	Payload []byte

	// Options are Priority, Delay, At and ID, as for Enqueue.
	Options []Option
}

// ReadyAt is when the item becomes ready if it is enqueued at now: now, or
// later with a Delay or At option. For middleware (a queue-time metric, a
// header); an item whose options are invalid reports now.
func (it EnqueueItem) ReadyAt(now time.Time) time.Time {
	var o sendOptions
	for _, opt := range it.Options {
		opt(&o)
	}
	switch {
	case !o.at.IsZero() && o.at.After(now):
		return o.at
	case o.delay > 0:
		return now.Add(o.delay)
	}
	return now
}

// EnqueueResult is what EnqueueBatch reports for one EnqueueItem, at the
// same index.
type EnqueueResult struct {
	// ID is the message's id: the one given with the ID option, or the one
	// generated.
	ID string

	// Err is nil when the message was stored, or ErrDuplicate when a waiting,
	// delayed, in-flight or dead message already has this ID. On a queue of
	// several shards it is also the error of a shard's part of a batch that
	// failed (see EnqueueBatch): that item was not stored.
	Err error
}

// prepared is one validated message, ready to be sent as 7 script arguments
// to the shard it goes to.
type prepared struct {
	id      string
	caller  bool
	grouped bool   // of a group: stored by enqueue.lua (lib.lua group_push)
	due     string // '' ready now, "+ms" after the server's now, "ms" at that unix time
	lane    int
	prio    int64
	score   string
	env     []byte
	shard   int
}

func (q *Queue) prepare(now time.Time, payload []byte, opts []Option) (prepared, error) {
	var o sendOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return prepared{}, o.err
	}
	if len(payload) == 0 {
		return prepared{}, ErrEmptyPayload
	}
	if err := validateHeaders(o.headers); err != nil {
		return prepared{}, err
	}
	if len(payload) > q.cfg.MaxPayload {
		return prepared{}, fmt.Errorf("%w: %d bytes (limit %d)", ErrPayloadTooLarge, len(payload), q.cfg.MaxPayload)
	}
	if o.group != "" {
		if err := checkGroup(&q.cfg, &o); err != nil {
			return prepared{}, err
		}
	}
	if !o.hasPriority {
		o.priority = q.cfg.Layout.defaultPriority()
	}
	lane, err := q.cfg.Layout.laneOf(o.priority)
	if err != nil {
		return prepared{}, err
	}
	// Due times round up to the millisecond, so promotion (which compares
	// whole milliseconds) never makes a message ready before its time. The
	// script adds a delay to the server's clock.
	var due string
	if !o.at.IsZero() {
		due = fmtInt(ceilMs(o.at))
	} else if o.delay > 0 {
		due = "+" + fmtInt(leaseMs(o.delay))
	}
	if len(q.shards) > 1 && o.id != "" && (o.group != "" || o.orderingKey != "") {
		return prepared{}, idRoutedElsewhere(len(q.shards), o)
	}
	p := prepared{id: o.id, caller: o.id != "", due: due, lane: lane, prio: o.priority, grouped: o.group != ""}
	switch {
	case len(q.shards) == 1:
	case o.group != "":
		p.shard = q.hashShard(o.group)
	case o.orderingKey != "":
		p.shard = q.hashShard(o.orderingKey)
	case p.caller:
		p.shard = q.hashShard(p.id)
	default:
		// In turn, a run of spreadRun messages to each shard: concurrent
		// enqueues then mostly meet in one shard's merged call (see
		// coalescer) instead of each making a round trip of its own.
		p.shard = int(q.next.Add(1) / spreadRun % uint32(len(q.shards)))
	}
	if !p.caller {
		p.id = newID(now)
		if len(q.shards) > 1 {
			p.id = shardID(p.id, p.shard)
		}
	}
	if q.cfg.Layout.isRange() {
		p.score = scoreOf(o.priority)
	}
	e := envelope{ID: p.id, CallerID: p.caller, Group: o.group, Priority: o.priority, EnqueuedMs: now.UnixMilli(), Headers: o.headers, Payload: payload}
	p.env = e.encode()
	return p, nil
}

// idRoutedElsewhere is the error of an ID given with a Group or an
// OrderingKey on a queue of several shards. A caller's id is kept unique
// by its shard's set of live ids, written in the same script as the
// message; the group or the key would choose another shard than the id's
// own, so the same id routed by two keys would be stored twice. Checking
// every shard cannot be atomic (their keys are in different cluster slots,
// and a script may touch one slot only), so the combination is refused.
func idRoutedElsewhere(shards int, o sendOptions) error {
	by := "OrderingKey"
	if o.group != "" {
		by = "Group"
	}
	return fmt.Errorf("%w: ID with %s on a queue of %d shards: the %s would choose the shard, and an id is "+
		"kept unique only within the shard it is stored in (one atomic check cannot see every shard, whose keys "+
		"are in different cluster slots), so the same id could be stored twice; give the id alone (it then "+
		"chooses its shard) or use a queue of one shard", ErrInvalidOption, by, shards, strings.ToLower(by[:1])+by[1:])
}

// Enqueue stores one message and returns its id. Options: Priority, Delay, At,
// ID. Bad input (ErrInvalidPriority, ErrEmptyPayload, ErrPayloadTooLarge,
// ErrInvalidID, ErrInvalidOption) is reported before anything is written. With
// an ID option that is already alive it returns the id and ErrDuplicate and
// stores nothing.
//
// One round trip (one Lua call, or an RPUSH for a ready message with a
// generated id in a Levels queue). When Enqueue returns nil the message is in
// Redis; whether it survives a Redis crash depends on Redis persistence and,
// for a failover, on Config.WaitReplicas (see the README). With WaitReplicas,
// an error wrapping ErrNotReplicated comes with the id: the message is stored
// but not confirmed by enough replicas; enqueueing it again would store a
// second copy, unless it has an ID (then the retry reports ErrDuplicate).
// Cancelling ctx abandons the call: the message may or may not have been
// stored; only a message enqueued with an ID option can be retried without
// risking a second copy.
func (q *Queue) Enqueue(ctx context.Context, payload []byte, opts ...Option) (string, error) {
	if len(q.cfg.EnqueueMiddleware) > 0 {
		res, err := q.enqueueChain(ctx, []EnqueueItem{{Payload: payload, Options: opts}})
		if len(res) != 1 {
			return "", err
		}
		if res[0].Err != nil {
			return res[0].ID, res[0].Err
		}
		return res[0].ID, err
	}
	p, err := q.prepare(q.now(), payload, opts)
	if err != nil {
		return "", err
	}
	res, err := q.shards[p.shard].send(ctx, []prepared{p})
	if res == nil {
		return "", err
	}
	if res[0].Err != nil {
		return res[0].ID, res[0].Err
	}
	return res[0].ID, err
}

// EnqueueBatch stores up to MaxBatch messages in one round trip (one Lua
// call, atomic: all are stored or, on a Redis error, none) and returns a
// result per item, in order. Any invalid item, or more than MaxBatch items,
// fails the whole batch before anything is written; duplicate ids are
// reported per item and do not stop the others. With Config.WaitReplicas, an
// error wrapping ErrNotReplicated comes with the results: the batch is
// stored, but not confirmed by enough replicas. Cancelling ctx abandons the
// call, as for Enqueue.
//
// On a queue of several shards the batch is one round trip per shard it
// touches, sent at once, and atomic per shard only: when a shard's part
// fails, the error (all parts' errors, joined) is returned with the results,
// the failed part's items carry it in Err, and the other parts are stored.
// Items with one OrderingKey, or one ID, go to one shard.
func (q *Queue) EnqueueBatch(ctx context.Context, items []EnqueueItem) ([]EnqueueResult, error) {
	if len(q.cfg.EnqueueMiddleware) > 0 {
		return q.enqueueChain(ctx, items)
	}
	return q.enqueueBatch(ctx, items)
}

// EnqueueFunc stores messages: the call an EnqueueMiddleware wraps. It
// returns one EnqueueResult per item, as EnqueueBatch does.
type EnqueueFunc func(ctx context.Context, items []EnqueueItem) ([]EnqueueResult, error)

// EnqueueMiddleware wraps every Enqueue and EnqueueBatch of a queue (an
// Enqueue is a batch of one item): to start a span and put its context in the
// items' headers (append a Headers option), count, log. It may change the
// items it passes on; it must return next's results for them.
type EnqueueMiddleware func(next EnqueueFunc) EnqueueFunc

// enqueueChain runs items through Config.EnqueueMiddleware, the first one
// outermost, down to enqueueBatch.
func (q *Queue) enqueueChain(ctx context.Context, items []EnqueueItem) ([]EnqueueResult, error) {
	f := EnqueueFunc(q.enqueueBatch)
	for i := len(q.cfg.EnqueueMiddleware) - 1; i >= 0; i-- {
		f = q.cfg.EnqueueMiddleware[i](f)
	}
	return f(ctx, items)
}

func (q *Queue) enqueueBatch(ctx context.Context, items []EnqueueItem) ([]EnqueueResult, error) {
	if len(items) == 0 {
		return nil, nil
	}
	if len(items) > MaxBatch {
		return nil, fmt.Errorf("%w: batch of %d items (MaxBatch is %d)", ErrInvalidOption, len(items), MaxBatch)
	}
	now := q.now()
	ps := make([]prepared, len(items))
	for i, it := range items {
		p, err := q.prepare(now, it.Payload, it.Options)
		if err != nil {
			return nil, fmt.Errorf("prioq: batch item %d: %w", i, err)
		}
		ps[i] = p
	}
	return q.send(ctx, ps)
}

// send stores ps in their shards: one round trip per shard, the shards at
// once. A shard's part of a batch is atomic; with several shards, one part
// can fail while another is stored, and only its items report the error.
func (q *Queue) send(ctx context.Context, ps []prepared) ([]EnqueueResult, error) {
	first := ps[0].shard
	if !slices.ContainsFunc(ps, func(p prepared) bool { return p.shard != first }) {
		return q.shards[first].send(ctx, ps)
	}
	parts := make(map[int][]int) // shard -> indexes into ps
	for i, p := range ps {
		parts[p.shard] = append(parts[p.shard], i)
	}
	out := make([]EnqueueResult, len(ps))
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for sh, idx := range parts {
		part := make([]prepared, len(idx))
		for j, i := range idx {
			part[j] = ps[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := q.shards[sh].send(ctx, part)
			mu.Lock()
			defer mu.Unlock()
			for j, i := range idx {
				out[i].ID = part[j].id
				switch {
				case j < len(res):
					out[i] = res[j]
				case err != nil:
					out[i].Err = err
				}
			}
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func (s *shard) send(ctx context.Context, ps []prepared) ([]EnqueueResult, error) {
	if s.canSendPlain(ps) {
		return s.sendPlain(ctx, ps[0])
	}
	if len(ps) == 1 && ps[0].grouped {
		return s.sendGrouped(ctx, ps[0])
	}
	return s.sendScript(ctx, ps)
}

// sendGrouped stores one message of a group, merged with the single
// enqueues of messages of groups that other goroutines make at the same
// time: one enqueue.lua call for all of them (a group's message needs the
// script: its marker goes into the lane only when its group's list was
// empty). Each gets its own outcome; a failure of the call is each one's.
func (s *shard) sendGrouped(ctx context.Context, p prepared) ([]EnqueueResult, error) {
	return s.sendMerged(ctx, s.grouped, p, func(ctx context.Context, ps []prepared) []plainResult {
		out := make([]plainResult, len(ps))
		send := s.sendGroupedScript
		if slices.ContainsFunc(ps, func(p prepared) bool { return p.caller || p.due != "" }) {
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
func (s *shard) sendGroupedScript(ctx context.Context, ps []prepared) ([]EnqueueResult, error) {
	keys, ki := s.laneKeys([]string{s.k.counts, s.k.wake}, ps)
	args := make([]string, 0, 3+3*len(ps))
	args = append(args, s.kind(), argYes, strconv.Itoa(len(ps)))
	for i, p := range ps {
		args = append(args, ki[i], p.score, string(p.env))
	}
	werr := s.write(ctx, s.eval(groupedScript, nil, keys, args...))
	if werr != nil && !errors.Is(werr, ErrNotReplicated) {
		return nil, fmt.Errorf("prioq: enqueue to %q: %w", s.name, werr)
	}
	out := make([]EnqueueResult, len(ps))
	for i, p := range ps {
		out[i].ID = p.id
	}
	if werr != nil {
		return out, fmt.Errorf("prioq: enqueue to %q: %w", s.name, werr)
	}
	return out, nil
}

// laneKeys appends to keys the lane keys ps use, each once, and returns
// them with each message's lane as its 1-based index in them (the scripts'
// KEYS index).
func (s *shard) laneKeys(keys []string, ps []prepared) ([]string, []string) {
	at := make(map[int]string, 4) // lane -> KEYS index
	ki := make([]string, len(ps))
	for i, p := range ps {
		k, ok := at[p.lane]
		if !ok {
			keys = append(keys, s.k.lanes[p.lane])
			k = strconv.Itoa(len(keys))
			at[p.lane] = k
		}
		ki[i] = k
	}
	return keys, ki
}

// sendScript stores ps with enqueue.lua: one call, atomic.
func (s *shard) sendScript(ctx context.Context, ps []prepared) ([]EnqueueResult, error) {
	keys, ki := s.laneKeys([]string{s.k.ids, s.k.seq, s.k.delayed, s.k.dstore, s.k.sched, s.k.wake, s.k.counts}, ps)
	args := make([]string, 0, 3+7*len(ps))
	args = append(args, s.armFlag(), s.kind(), strconv.Itoa(len(ps)))
	for i, p := range ps {
		caller := argNo
		if p.caller {
			caller = argYes
		}
		args = append(args, p.id, caller, p.due, strconv.Itoa(p.lane),
			ki[i], p.score, string(p.env))
	}
	var codes []int
	werr := s.write(ctx, s.eval(enqueueScript, &codes, keys, args...))
	if werr != nil && !errors.Is(werr, ErrNotReplicated) {
		return nil, fmt.Errorf("prioq: enqueue to %q: %w", s.name, werr)
	}
	if len(codes) != len(ps) {
		return nil, fmt.Errorf("prioq: enqueue to %q: %w: %d codes for %d messages", s.name, ErrScript, len(codes), len(ps))
	}
	out := make([]EnqueueResult, len(ps))
	for i, p := range ps {
		out[i].ID = p.id
		if codes[i] == 0 {
			out[i].Err = fmt.Errorf("prioq: enqueue %q to %q: %w", p.id, s.name, ErrDuplicate)
		}
	}
	if werr != nil {
		return out, fmt.Errorf("prioq: enqueue to %q: %w", s.name, werr)
	}
	return out, nil
}

// canSendPlain reports whether a send needs no script: one message, to a
// Levels queue or a Range queue of format 4, ready now (no Delay, no At: the
// server's clock decides when those are due), with a generated id (so there
// is no duplicate to detect). This is the common case, and a Lua call costs
// Redis ~10 µs of fixed overhead that an RPUSH does not. Batches keep the
// script: it makes them atomic and its overhead is shared by the batch.
// (Range queues of earlier formats need the seq counter's next value in
// the member, which only a script can read and write in one step.)
func (s *shard) canSendPlain(ps []prepared) bool {
	return len(ps) == 1 && (!s.isRange() || s.lists()) && !ps[0].caller && ps[0].due == "" && !ps[0].grouped
}

// sendPlain stores one ready message of a Levels queue without Lua, merged
// with the single enqueues of other goroutines in flight at the same time
// (see coalescer): one round trip for all of them.
func (s *shard) sendPlain(ctx context.Context, p prepared) ([]EnqueueResult, error) {
	return s.sendMerged(ctx, s.plain, p, s.sendPlainMany)
}

// sendMerged sends p through coalescer c, which runs run for p and the
// other enqueues merged with it, and returns p's outcome as send does.
func (s *shard) sendMerged(ctx context.Context, c *coalescer[prepared, plainResult], p prepared,
	run func(context.Context, []prepared) []plainResult) ([]EnqueueResult, error) {
	r := c.do(ctx, p, run, func(err error) plainResult {
		return plainResult{err: fmt.Errorf("prioq: enqueue to %q: %w", s.name, err)}
	})
	if r.err != nil && r.res.ID == "" {
		return nil, r.err
	}
	return []EnqueueResult{r.res}, r.err
}

type plainResult struct {
	res EnqueueResult // ID set when the message is stored
	err error
}

// Bounds of one merged enqueue: a reply per lane, so the count only bounds
// the call's size; the bytes keep large messages from making one huge request.
const (
	maxMergedEnqueues     = 256
	maxMergedEnqueueBytes = 1 << 20
)

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
func (s *shard) sendPlainMany(ctx context.Context, ps []prepared) []plainResult {
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
func (s *shard) sendPlainOnce(ctx context.Context, ps []prepared, idx []int, out []plainResult) (redo []prepared, redoIdx []int) {
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
	best := ps[0].prio
	for j, m := range ps {
		l := s.k.lanes[m.lane]
		var u namedPush
		if tx != nil {
			u = s.namedPush(m.lane, m.prio)
			l = u.list
		}
		dest[j] = l
		if byList[l] == nil {
			order = append(order, l)
			if tx != nil {
				tx.pushes = append(tx.pushes, u)
			}
		}
		byList[l] = append(byList[l], string(m.env))
		best = max(best, m.prio)
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
		// several shards: see wake in lua/lib.lua.
		arm = func() radix.Action {
			return radix.Cmd(&armed, "ZADD", s.k.wake, "LT", fmtInt(-best), wakeMember)
		}
		p.Append(arm())
		// Announce the work for MultiConsumers (multi.go) as arm_wake does
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
		out[i] = plainResult{res: EnqueueResult{ID: m.id}}
		if notRepl != nil {
			out[i].err = fmt.Errorf("prioq: enqueue to %q: %w", s.name, notRepl)
		}
	}
	return redo, redoIdx
}

// namedPush is one push into a list that an index must name: vals go to
// list, and index gets member name with score; lane, when not "", is then
// named in the filled index.
type namedPush struct {
	list, index, score, name string
	lane                     string
	vals                     []string
}

// namedPush is the push of a message of lane and priority prio: into the
// list of prio, named in lane's segment index (Range, format 4; and the
// segment in the filled index, format 5), or into lane, named in the filled
// index (Levels, format 5).
func (s *shard) namedPush(lane int, prio int64) namedPush {
	n := strconv.Itoa(lane)
	if !s.lists() {
		return namedPush{list: s.k.lanes[lane], index: s.k.filled, score: "-" + n, name: n}
	}
	u := namedPush{list: s.k.prioList(prio), index: s.k.lanes[lane], score: scoreOf(prio), name: fmtInt(prio)}
	if s.filled() {
		u.lane = n
	}
	return u
}

// namedTx makes pushes into named lists visible (Range of format 4, Levels
// of format 5), for the plain enqueue and the AtMostOnce put-back: each push
// and the ZADD naming its list go in one transaction, so that a cut
// connection or a full Redis (which refuses the whole EXEC) cannot leave a
// list no index names. A command's own error (a key of the wrong type) does
// not undo the others: results takes back out what was pushed into a Range
// priority's list whose name was refused. A level whose name was refused
// (a filled index of the wrong type) keeps its messages: takes pass such an
// index by and pop over every lane (take.lua).
type namedTx struct {
	s      *shard
	cmd    string // RPUSH (enqueue) or LPUSH (put-back)
	pushes []namedPush
	exec   []any // the transaction's replies
}

// appendTo appends the transaction to p.
func (t *namedTx) appendTo(p *radix.Pipeline) {
	p.Append(radix.Cmd(nil, "MULTI"))
	for _, u := range t.pushes {
		p.Append(radix.Cmd(nil, t.cmd, append([]string{u.list}, u.vals...)...))
		p.Append(radix.Cmd(nil, "ZADD", u.index, u.score, u.name))
		if u.lane != "" {
			p.Append(radix.Cmd(nil, "ZADD", t.s.k.filled, "-"+u.lane, u.lane))
		}
	}
	p.Append(radix.Cmd(&t.exec, "EXEC"))
}

// results gives, once the pipeline holding the transaction returned err,
// each push's list length after it (0: not stored, or not known when err
// is not a reply) and why it was not stored. Replies are read only after a
// reply: an abandoned call may still write them. A push whose name was
// refused can only have met a segment key of the wrong type (a full Redis
// or a moving slot refuses the whole EXEC), so it is not named again: its
// values are taken back out (LREM; envelopes are unique), with a deadline
// of its own, as the caller's may be what ended the call.
func (t *namedTx) results(ctx context.Context, err error) (lengths []int64, errs []error) {
	lengths, errs = make([]int64, len(t.pushes)), make([]error, len(t.pushes))
	// Each push's replies: the push, its name, and the filled index's.
	at, n := make([]int, len(t.pushes)), 0
	for i, u := range t.pushes {
		at[i] = n
		n += 2
		if u.lane != "" {
			n++
		}
	}
	if !(err == nil || isReply(err)) || len(t.exec) != n {
		return lengths, errs
	}
	from := "-1" // RPUSH: the values are at the tail
	if t.cmd == "LPUSH" {
		from = "1"
	}
	for i, u := range t.pushes {
		if e, ok := t.exec[at[i]].(error); ok {
			errs[i] = e
			continue
		}
		lengths[i], _ = t.exec[at[i]].(int64)
		// (The filled index's refusal hides nothing: takes pass such an
		// index by, see namedTx.)
		refused, ok := t.exec[at[i]+1].(error)
		if !ok || u.index == t.s.k.filled {
			continue
		}
		key := u.list
		lengths[i], errs[i] = 0, fmt.Errorf("naming %s in its segment's index: %w", key, refused)
		p := radix.NewPipeline()
		for _, v := range u.vals {
			p.Append(radix.Cmd(nil, "LREM", key, from, v))
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.s.cfg.CallTimeout)
		if uerr := t.s.do(cctx, p); uerr != nil {
			errs[i] = fmt.Errorf("%w; taking its messages back out failed too, they wait unseen in %s: %w", errs[i], key, uerr)
		}
		cancel()
	}
	return lengths, errs
}
