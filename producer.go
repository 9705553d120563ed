package prioq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/store"
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
	once        store.Once // UniqueFor, UniqueKey, Debounce, DebounceFirst
	onces       int        // how many of those were given (one at most)
	uniqueByID  bool       // UniqueFor: the key is the id
	startBy     time.Time  // StartBy
	maxWait     time.Duration
	hasStartBy  bool             // StartBy or MaxWait given
	sched       *scheduleOptions // Schedule's own (schedules.go): Enqueue refuses them
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

// Limits of headers: Enqueue refuses more with ErrInvalidHeader.
const (
	// MaxHeaders is the most headers one message carries.
	MaxHeaders = 64

	// MaxHeaderKey is the longest header key, in bytes (at least 1).
	MaxHeaderKey = 256

	// MaxHeaderBytes bounds all keys and values of one message together.
	MaxHeaderBytes = 16 << 10
)

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
		if err := store.ValidateCallerID(id); err != nil {
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
	case o.once.Debounce:
		return now.Add(o.once.Window) // the debounce sets the due time
	}
	return now
}

// EnqueueResult is what EnqueueBatch reports for one EnqueueItem, at the
// same index.
type EnqueueResult struct {
	// ID is the message's id: the one given with the ID option, or the one
	// generated ("" for a generated id whose message was refused: it names
	// nothing).
	ID string

	// Err is nil when the message was stored, or ErrDuplicate when a waiting,
	// delayed, in-flight or dead message already has this ID, or its unique
	// window is open (UniqueFor, UniqueKey). On a queue of several shards it
	// is also the error of a shard's part of a batch that failed (see
	// EnqueueBatch): that item was not stored.
	Err error

	// Folded reports an enqueue with DebounceFirst that went into the
	// message already pending for its key: nothing was stored, ID is that
	// message's, now due when this one would have been.
	Folded bool
}

// prepared is one validated message, ready to go to the shard it is routed
// to.
type prepared struct {
	store.Item
	shard int
}

func (q *Queue) prepare(now time.Time, payload []byte, opts []Option) (prepared, error) {
	var o sendOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return prepared{}, o.err
	}
	if o.sched != nil {
		return prepared{}, fmt.Errorf("%w: Missed and TickID are options of Schedule, not of Enqueue", ErrInvalidOption)
	}
	if len(payload) == 0 {
		return prepared{}, ErrEmptyPayload
	}
	if err := store.ValidateHeaders(o.headers); err != nil {
		return prepared{}, err
	}
	if len(payload) > q.cfg.MaxPayload {
		return prepared{}, fmt.Errorf("%w: %d bytes (limit %d)", ErrPayloadTooLarge, len(payload), q.cfg.MaxPayload)
	}
	if o.group != "" {
		if err := q.checkGroup(&o); err != nil {
			return prepared{}, err
		}
	}
	if err := o.checkOnce(len(q.shards)); err != nil {
		return prepared{}, err
	}
	if o.once.Debounce {
		o.delay = o.once.Window
	}
	if err := o.setStartBy(now); err != nil {
		return prepared{}, err
	}
	layout := q.layout()
	if !o.hasPriority {
		o.priority = layout.DefaultPriority()
	}
	lane, err := layout.LaneOf(o.priority)
	if err != nil {
		return prepared{}, err
	}
	// Due times round up to the millisecond, so promotion (which compares
	// whole milliseconds) never makes a message ready before its time. The
	// script adds a delay to the server's clock.
	var due string
	if !o.at.IsZero() {
		due = store.DueAt(o.at)
	} else if o.delay > 0 {
		due = store.DueIn(o.delay)
	}
	if len(q.shards) > 1 && o.id != "" && (o.group != "" || o.orderingKey != "") {
		return prepared{}, idRoutedElsewhere(len(q.shards), o)
	}
	p := prepared{Item: store.Item{ID: o.id, Caller: o.id != "", Due: due, Lane: lane, Priority: o.priority, Grouped: o.group != "", Once: o.once}}
	switch {
	case len(q.shards) == 1:
	case o.once.Key != "" && !o.uniqueByID:
		p.shard = q.hashShard(o.once.Key)
	case o.group != "":
		p.shard = q.hashShard(o.group)
	case o.orderingKey != "":
		p.shard = q.hashShard(o.orderingKey)
	case p.Caller:
		p.shard = q.hashShard(p.ID)
	default:
		// In turn, a run of spreadRun messages to each shard: concurrent
		// enqueues then mostly meet in one shard's merged call (see
		// coalescer) instead of each making a round trip of its own.
		p.shard = int(q.next.Add(1) / spreadRun % uint32(len(q.shards)))
	}
	if !p.Caller {
		p.ID = store.GeneratedID(now, p.shard, len(q.shards))
	}
	if layout.IsRange() {
		p.Score = store.ScoreOf(o.priority)
	}
	e := store.Envelope{ID: p.ID, CallerID: p.Caller, Group: o.group, Priority: o.priority, EnqueuedMs: now.UnixMilli(), Headers: o.headers, Payload: payload}
	p.Env = e.Encode()
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
	res, err := q.shards[p.shard].Send(ctx, []store.Item{p.Item})
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
		items := make([]store.Item, len(ps))
		for i, p := range ps {
			items[i] = p.Item
		}
		res, err := q.shards[first].Send(ctx, items)
		return resultsOf(res), err
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
		part := make([]store.Item, len(idx))
		for j, i := range idx {
			part[j] = ps[i].Item
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := q.shards[sh].Send(ctx, part)
			mu.Lock()
			defer mu.Unlock()
			for j, i := range idx {
				out[i].ID = part[j].ID
				switch {
				case j < len(res):
					out[i] = EnqueueResult(res[j])
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

// resultsOf is the EnqueueResult of each Result (nil for nil).
func resultsOf(res []store.Result) []EnqueueResult {
	if res == nil {
		return nil
	}
	out := make([]EnqueueResult, len(res))
	for i, r := range res {
		out[i] = EnqueueResult(r)
	}
	return out
}
