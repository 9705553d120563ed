package prioq

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mediocregopher/radix/v4"
)

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

// leaseMs is d in whole milliseconds, rounded up (a lease or a delay is never
// shorter than asked), and at least 0.
func leaseMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// leaseSuffix is random per take call: take.lua puts the take's server time
// and each message's place in the take in front of it. With it tokens are
// never reused, even across a step back of the server's clock, so an ack from
// an old delivery cannot match a new one.
func leaseSuffix() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// take leases up to n ready messages from the lanes in the given order.
// It returns paused=true when the queue is paused. One round trip.
//
// The lease ends lease after the server's now when the script runs. The
// deadline the message carries is lease after this host's monotonic clock
// before the call: no later than the server's, whatever the host's wall
// clock says, so a handler's context never outlives its lease.
func (q *Queue) take(ctx context.Context, lanes []string, n int, lease time.Duration) (msgs []*Message, paused bool, err error) {
	keys := append([]string{q.k.paused, q.k.leases, q.k.inflight, q.k.wake}, lanes...)
	start := time.Now()
	args := []string{fmtInt(leaseMs(lease)), strconv.Itoa(n), q.kind(), leaseSuffix()}
	var raw [][]byte
	if err := q.do(ctx, takeScript.Cmd(&raw, keys, args...)); err != nil {
		return nil, false, fmt.Errorf("prioq: take from %q: %w", q.name, err)
	}
	if len(raw) == 1 && string(raw[0]) == replyPaused {
		return nil, true, nil
	}
	if n := len(raw); n >= 2 && string(raw[n-2]) == replyBroken {
		q.logBrokenLanes(ctx, string(raw[n-1]))
		raw = raw[:n-2]
	}
	if len(raw)%2 != 0 {
		return nil, false, fmt.Errorf("prioq: take from %q: %w: %d reply items", q.name, ErrScript, len(raw))
	}
	deadline := start.Add(lease)
	for i := 0; i < len(raw); i += 2 {
		token, member := string(raw[i]), raw[i+1]
		e, derr := q.decodeLaneEntry(member)
		if derr != nil {
			// Corrupt entries were leased like any other, so this is safe to
			// report and move aside without losing anything else.
			q.bury(ctx, token, derr)
			continue
		}
		m := newMessage(e)
		m.Attempts++ // the stored count is of the deliveries before this one
		m.q, m.token, m.deadline, m.raw = q, token, deadline, member
		msgs = append(msgs, m)
	}
	return msgs, false, nil
}

// brokenLogEvery is how often at most a queue logs the lane keys of the wrong
// type its takes pass by (each take while they are broken would say it).
const brokenLogEvery = time.Minute

// logBrokenLanes says, at most once per brokenLogEvery, that takes pass by
// lane keys of the wrong type: their messages wait until the keys are mended.
func (q *Queue) logBrokenLanes(ctx context.Context, keys string) {
	now := time.Now().UnixNano()
	last := q.brokenLogged.Load()
	if now-last < int64(brokenLogEvery) || !q.brokenLogged.CompareAndSwap(last, now) {
		return
	}
	q.cfg.Logger.LogAttrs(ctx, slog.LevelError, "prioq: lane keys of the wrong type: takes pass them by until they are mended",
		slog.String("queue", q.name), slog.String("keys", keys))
}

// takeMerged is take over the queue's fixed lane order, merged with the
// takes of the queue's other consumers (same lease) in flight at the same
// time: one script call pops for all of them, each gets its own messages
// (the first asker the first ones, so the priority order holds across them).
// A take still queued when ctx ends (the consumer closing), or CallTimeout
// after it queued, is dropped and returns an error; one sent is waited for
// whatever ctx does, because its leased messages must reach their asker
// (each merged call has CallTimeout).
func (q *Queue) takeMerged(ctx context.Context, n int, lease time.Duration) ([]*Message, error) {
	q.takes.mu.Lock()
	c := q.takes.byLease[lease]
	if c == nil {
		c = &coalescer[int, takeResult]{
			run:  func(ctx context.Context, ns []int) []takeResult { return q.takeFor(ctx, ns, lease) },
			size: func(n int) int { return n }, maxItems: MaxBatch, maxBytes: MaxBatch, timeout: q.cfg.CallTimeout,
			keepSent: true,
		}
		q.takes.byLease[lease] = c
	}
	q.takes.mu.Unlock()
	r := c.do(ctx, n, func(err error) takeResult { return takeResult{err: fmt.Errorf("prioq: take from %q: %w", q.name, err)} })
	return r.msgs, r.err
}

// takeMergers holds a queue's take coalescers, one per lease duration.
type takeMergers struct {
	mu      sync.Mutex
	byLease map[time.Duration]*coalescer[int, takeResult]
}

type takeResult struct {
	msgs []*Message
	err  error
}

// takeFor makes one take for askers wanting ns[i] messages each and shares
// out what it got, in order.
func (q *Queue) takeFor(ctx context.Context, ns []int, lease time.Duration) []takeResult {
	total := 0
	for _, n := range ns {
		total += n
	}
	out := make([]takeResult, len(ns))
	msgs, _, err := q.take(ctx, q.k.highFirst, min(total, MaxBatch), lease)
	for i, n := range ns {
		if err != nil {
			out[i].err = err
			continue
		}
		k := min(n, len(msgs))
		out[i].msgs, msgs = msgs[:k:k], msgs[k:]
	}
	return out
}

// bury moves a delivery that cannot be decoded to the dead-letter list with
// the reason. On a Redis error the lease simply expires and the sweep retries.
func (q *Queue) bury(ctx context.Context, token string, why error) {
	q.cfg.Logger.LogAttrs(ctx, slog.LevelError, "prioq: corrupt message moved to the dead letters",
		slog.String("queue", q.name), slog.String("token", token), slog.Any("error", why))
	_ = q.failToken(ctx, token, 0, why.Error(), failBury)
}

// fail ends m's delivery with fail.lua's op (failRetry or failDead) and,
// when it happened, records how on m.
func (q *Queue) fail(ctx context.Context, m *Message, after time.Duration, reason, op string) error {
	code, err := q.finishToken(ctx, m.token, after, reason, op)
	switch {
	case code == failCodeDead:
		m.finished.CompareAndSwap(0, int32(OutcomeDeadLettered))
	case code == failCodeRequeued:
		m.finished.CompareAndSwap(0, int32(OutcomeRetried))
	}
	if err != nil {
		return fmt.Errorf("prioq: %s %q: %w", op, m.ID, err)
	}
	return nil
}

func (q *Queue) failToken(ctx context.Context, token string, after time.Duration, reason, op string) error {
	_, err := q.finishToken(ctx, token, after, reason, op)
	return err
}

// fail.lua's replies.
const (
	failCodeLost     = 0
	failCodeRequeued = 1
	failCodeDead     = 2
)

// finishToken runs fail.lua and returns its reply (failCode*) and an error:
// ErrLeaseLost for failCodeLost; with Config.WaitReplicas, ErrNotReplicated
// beside a reply that says what was done.
func (q *Queue) finishToken(ctx context.Context, token string, after time.Duration, reason, op string) (int, error) {
	code := failCodeLost
	err := q.write(ctx, failScript.Cmd(&code, q.k.failKeys, token,
		fmtInt(leaseMs(after)), reason, strconv.Itoa(q.cfg.MaxAttempts), q.kind(), op))
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return failCodeLost, err
	}
	if code == failCodeLost {
		return code, ErrLeaseLost
	}
	return code, err
}

// release gives leased messages back to the head of their lanes, in their
// order, without counting the delivery, in one round trip (release.lua), and
// returns how many came back (a message whose lease is gone is not this
// consumer's any more).
func (q *Queue) release(ctx context.Context, msgs []*Message) (int, error) {
	args := make([]string, 0, 1+len(msgs))
	args = append(args, q.kind())
	for _, m := range msgs {
		args = append(args, m.token)
	}
	var n int
	if err := q.do(ctx, releaseScript.Cmd(&n, q.k.releaseKeys, args...)); err != nil {
		return 0, fmt.Errorf("prioq: release %d messages of %q: %w", len(msgs), q.name, err)
	}
	return n, nil
}

// sweep redelivers messages whose lease has expired (or dead-letters them past
// MaxAttempts), up to limit per call, and re-arms a lost wake-up. One round
// trip.
func (q *Queue) sweep(ctx context.Context, limit int) (back, dead int, more bool, err error) {
	var res []int
	err = q.do(ctx, sweepScript.Cmd(&res, q.k.sweepKeys, strconv.Itoa(limit),
		strconv.Itoa(q.cfg.MaxAttempts), q.kind()))
	if err != nil {
		return 0, 0, false, fmt.Errorf("prioq: sweep %q: %w", q.name, err)
	}
	if len(res) != 3 {
		return 0, 0, false, fmt.Errorf("prioq: sweep %q: %w", q.name, ErrScript)
	}
	return res[0], res[1], res[2] == 1, nil
}

// Pause stops consumers from taking messages (AtLeastOnce): a take that starts
// after Pause returns takes nothing. Producers keep enqueueing, delayed
// messages keep being promoted, and messages already in flight finish. One
// round trip. AtMostOnce queues return ErrWrongMode: their consumers pop lanes
// directly with a blocking command that cannot consult a flag. Cancelling ctx
// abandons the call; the queue is then paused or not.
func (q *Queue) Pause(ctx context.Context) error {
	if q.cfg.Mode != AtLeastOnce {
		return fmt.Errorf("prioq: pause %q: %w", q.name, ErrWrongMode)
	}
	if err := q.do(ctx, pauseScript.Cmd(nil, []string{q.k.paused}, q.kind())); err != nil {
		return fmt.Errorf("prioq: pause %q: %w", q.name, err)
	}
	return nil
}

// Resume undoes Pause and wakes an idle consumer. One round trip. It succeeds
// once the pause is lifted, even if the wake-up could not be set (at
// maxmemory): the lease sweep then wakes a consumer within SweepInterval.
// Cancelling ctx abandons the call; the queue is then resumed or not.
func (q *Queue) Resume(ctx context.Context) error {
	if q.cfg.Mode != AtLeastOnce {
		return fmt.Errorf("prioq: resume %q: %w", q.name, ErrWrongMode)
	}
	deleted := int64(-1) // DEL's reply; -1 until it arrives
	p := radix.NewPipeline()
	p.Append(radix.Cmd(&deleted, "DEL", q.k.paused))
	p.Append(radix.Cmd(nil, "ZADD", q.k.wake, "0", wakeMember))
	if err := q.do(ctx, p); err != nil && !(isReply(err) && deleted >= 0) {
		return fmt.Errorf("prioq: resume %q: %w", q.name, err)
	}
	return nil
}

// DeadLetter describes one message in the dead-letter list.
type DeadLetter struct {
	MessageInfo

	// Reason is the last error: the handler's error, "lease expired", or why
	// the stored envelope did not decode.
	Reason string

	// DiedAt is when it was moved to the dead-letter list.
	DiedAt time.Time

	// Raw is the stored envelope, set only when it did not decode (then only
	// ID, read from Raw when possible, is set in MessageInfo), or the whole
	// damaged record of a message buried because it no longer said which
	// lane it came from (MessageInfo is then the message found inside it,
	// if any). Such a dead letter cannot be requeued (see RequeueDead).
	Raw []byte
}

// DeadLetters describes up to n dead-letter records (at most MaxBatch,
// however large n is) from offset start, oldest first. One round trip.
// Cancelling ctx abandons the read.
func (q *Queue) DeadLetters(ctx context.Context, start, n int) ([]DeadLetter, error) {
	if start < 0 || n < 1 {
		return nil, fmt.Errorf("%w: DeadLetters(%d, %d)", ErrInvalidOption, start, n)
	}
	n = min(n, MaxBatch)
	end := start + n - 1
	if end < start { // start is near math.MaxInt: no list is that long
		end = math.MaxInt
	}
	var recs [][]byte
	if err := q.do(ctx, radix.Cmd(&recs, "LRANGE", q.k.dead, strconv.Itoa(start), strconv.Itoa(end))); err != nil {
		return nil, fmt.Errorf("prioq: dead letters of %q: %w", q.name, err)
	}
	out := make([]DeadLetter, 0, len(recs))
	for _, r := range recs {
		d, err := parseDead(r)
		if err != nil {
			return out, fmt.Errorf("prioq: dead letters of %q: %w", q.name, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// parseDead reads "lane|score|diedMs|reasonLen|reason" followed by the envelope.
func parseDead(r []byte) (DeadLetter, error) {
	s := string(r)
	parts := strings.SplitN(s, "|", 5)
	if len(parts) != 5 {
		return DeadLetter{}, fmt.Errorf("%w: dead-letter record", ErrCorrupt)
	}
	died, err1 := strconv.ParseInt(parts[2], 10, 64)
	rlen, err2 := strconv.Atoi(parts[3])
	if err1 != nil || err2 != nil || rlen < 0 || rlen > len(parts[4]) {
		return DeadLetter{}, fmt.Errorf("%w: dead-letter record header", ErrCorrupt)
	}
	d := DeadLetter{Reason: parts[4][:rlen], DiedAt: time.UnixMilli(died)}
	raw := []byte(parts[4][rlen:])
	if parts[0] == unknownLane {
		// The whole damaged record was kept (see dead.lua body_env): show
		// its bytes, and the message inside them where one decodes.
		d.Raw = raw
		for _, off := range unknownLaneStarts(raw) {
			if e, err := decodeEnvelope(raw[off:]); err == nil {
				d.MessageInfo = newInfo(e)
				return d, nil
			}
			if d.ID == "" {
				d.ID = envelopeID(raw[off:])
			}
		}
		return d, nil
	}
	e, err := decodeEnvelope(raw)
	if err != nil {
		d.ID = envelopeID(raw)
		d.Raw = raw
		return d, nil
	}
	d.MessageInfo = newInfo(e)
	return d, nil
}

// unknownLaneStarts are the offsets where the envelope may start in the body
// of a dead letter of unknown lane: 0, after "lane|score|", and after that and
// a sequence number (dead.lua body_env tries the same).
func unknownLaneStarts(body []byte) []int {
	starts := []int{0}
	if i := bytes.IndexByte(body, '|'); i >= 0 {
		if j := bytes.IndexByte(body[i+1:], '|'); j >= 0 {
			p := i + 1 + j + 1
			starts = append(starts, p)
			if p+seqLen <= len(body) {
				starts = append(starts, p+seqLen)
			}
		}
	}
	return starts
}

func (q *Queue) deadOp(ctx context.Context, op, id string) (int64, error) {
	var n int64
	if err := q.do(ctx, deadScript.Cmd(&n, q.k.deadKeys, op, id, q.kind(), q.armFlag())); err != nil {
		return 0, fmt.Errorf("prioq: %s dead letters of %q: %w", op, q.name, err)
	}
	return n, nil
}

// RequeueDead puts the dead message with this id back at the tail of its lane
// with 0 attempts, keeping its id. ErrNotFound when no dead message has it;
// ErrCorrupt when its dead letter was buried because its routing did not parse
// (it stays until PurgeDead; its payload can be enqueued again by hand), or
// when its lane key holds the wrong type (it stays until the key is mended).
// One round trip; O(dead-letter list) inside Redis. Cancelling ctx abandons
// the call; the message is then either requeued or not.
func (q *Queue) RequeueDead(ctx context.Context, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	n, err := q.deadOp(ctx, deadRequeue, id)
	switch {
	case err != nil:
	case n == 0:
		err = fmt.Errorf("prioq: requeue %q in %q: %w", id, q.name, ErrNotFound)
	case n == -2:
		err = fmt.Errorf("prioq: requeue %q in %q: %w: its lane key holds the wrong type; mend the key, then requeue", id, q.name, ErrCorrupt)
	case n < 0:
		err = fmt.Errorf("prioq: requeue %q in %q: %w: its dead letter does not say which lane it came from (its Reason says why)", id, q.name, ErrCorrupt)
	}
	return err
}

// RequeueAllDead requeues every dead message and returns how many. One round
// trip. Cancelling ctx abandons the call; the requeue then happened whole or
// not at all.
func (q *Queue) RequeueAllDead(ctx context.Context) (int64, error) {
	return q.deadOp(ctx, deadRequeue, "")
}

// PurgeDead deletes every dead message, releasing their caller ids, and returns
// how many. One round trip. Cancelling ctx abandons the call; the purge then
// happened whole or not at all.
func (q *Queue) PurgeDead(ctx context.Context) (int64, error) {
	return q.deadOp(ctx, deadPurge, "")
}
