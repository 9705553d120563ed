package prioq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
)

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

// leasePrefix is unique per take call; the script numbers the messages after it.
// Tokens are never reused, so an ack from an old delivery cannot match a new one.
func leasePrefix() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// take leases up to n ready messages from the lanes in the given order.
// It returns paused=true when the queue is paused. One round trip.
func (q *Queue) take(ctx context.Context, lanes []string, n int, lease time.Duration) (msgs []*Message, paused bool, err error) {
	keys := append([]string{q.k.paused, q.k.leases, q.k.inflight, q.k.wake}, lanes...)
	now := time.Now()
	args := []string{fmtInt(now.UnixMilli()), fmtInt(lease.Milliseconds()), strconv.Itoa(n), q.kind(), leasePrefix()}
	var raw [][]byte
	if err := q.c.Do(ctx, takeScript.Cmd(&raw, keys, args...)); err != nil {
		return nil, false, fmt.Errorf("prioq: take from %q: %w", q.name, err)
	}
	if len(raw) == 1 && string(raw[0]) == "paused" {
		return nil, true, nil
	}
	if len(raw)%2 != 0 {
		return nil, false, fmt.Errorf("prioq: take from %q: %w: %d reply items", q.name, ErrScript, len(raw))
	}
	deadline := now.Add(lease)
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
		m.q, m.token, m.deadline, m.raw = q, token, deadline, member
		msgs = append(msgs, m)
	}
	return msgs, false, nil
}

// bury moves a delivery that cannot be decoded to the dead-letter list with
// the reason. On a Redis error the lease simply expires and the sweep retries.
func (q *Queue) bury(ctx context.Context, token string, why error) {
	_ = q.failToken(ctx, token, 0, why.Error(), "bury")
}

func (q *Queue) fail(ctx context.Context, m *Message, after time.Duration, reason string, release bool) error {
	op := "retry"
	if release {
		op = "release"
	}
	err := q.failToken(ctx, m.token, after, reason, op)
	if err != nil {
		return fmt.Errorf("prioq: %s %q: %w", op, m.ID, err)
	}
	return nil
}

func (q *Queue) failToken(ctx context.Context, token string, after time.Duration, reason, op string) error {
	var code int
	err := q.c.Do(ctx, failScript.Cmd(&code, q.k.failKeys, token, fmtInt(time.Now().UnixMilli()),
		fmtInt(after.Milliseconds()), reason, strconv.Itoa(q.cfg.MaxAttempts), q.kind(), op))
	if err != nil {
		return err
	}
	if code == 0 {
		return ErrLeaseLost
	}
	return nil
}

// sweep redelivers messages whose lease has expired (or dead-letters them past
// MaxAttempts), up to limit per call, and re-arms a lost wake-up. One round trip.
func (q *Queue) sweep(ctx context.Context, limit int) (back, dead int, more bool, err error) {
	var res []int
	err = q.c.Do(ctx, sweepScript.Cmd(&res, q.k.sweepKeys, fmtInt(time.Now().UnixMilli()), strconv.Itoa(limit),
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
// directly with a blocking command that cannot consult a flag.
func (q *Queue) Pause(ctx context.Context) error {
	if q.cfg.Mode != AtLeastOnce {
		return fmt.Errorf("prioq: pause %q: %w", q.name, ErrWrongMode)
	}
	p := radix.NewPipeline()
	p.Append(radix.Cmd(nil, "DEL", q.k.paused))
	if q.isRange() {
		p.Append(radix.Cmd(nil, "ZADD", q.k.paused, "0", "p"))
	} else {
		p.Append(radix.Cmd(nil, "RPUSH", q.k.paused, "p"))
	}
	if err := q.c.Do(ctx, p); err != nil {
		return fmt.Errorf("prioq: pause %q: %w", q.name, err)
	}
	return nil
}

// Resume undoes Pause and wakes an idle consumer. One round trip.
func (q *Queue) Resume(ctx context.Context) error {
	if q.cfg.Mode != AtLeastOnce {
		return fmt.Errorf("prioq: resume %q: %w", q.name, ErrWrongMode)
	}
	p := radix.NewPipeline()
	p.Append(radix.Cmd(nil, "DEL", q.k.paused))
	p.Append(radix.Cmd(nil, "ZADD", q.k.wake, "0", "w"))
	if err := q.c.Do(ctx, p); err != nil {
		return fmt.Errorf("prioq: resume %q: %w", q.name, err)
	}
	return nil
}

// DeadLetter is one message in the dead-letter list.
type DeadLetter struct {
	*Message
	// Reason is the last error: the handler's error, "lease expired", or why
	// the stored envelope did not decode.
	Reason string
	// DiedAt is when it was moved to the dead-letter list.
	DiedAt time.Time
	// Raw is the stored envelope, set only when it did not decode.
	Raw []byte
}

// DeadLetters lists up to n dead-letter records from offset start, oldest first.
// One round trip.
func (q *Queue) DeadLetters(ctx context.Context, start, n int) ([]DeadLetter, error) {
	if start < 0 || n < 1 {
		return nil, fmt.Errorf("%w: DeadLetters(%d, %d)", ErrInvalidOption, start, n)
	}
	var recs [][]byte
	if err := q.c.Do(ctx, radix.Cmd(&recs, "LRANGE", q.k.dead, strconv.Itoa(start), strconv.Itoa(start+n-1))); err != nil {
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
	e, err := decodeEnvelope(raw)
	if err != nil {
		d.Message = &Message{ID: envelopeID(raw)}
		d.Raw = raw
		return d, nil
	}
	d.Message = newMessage(e)
	return d, nil
}

func (q *Queue) deadOp(ctx context.Context, op, id string) (int, error) {
	var n int
	if err := q.c.Do(ctx, deadScript.Cmd(&n, q.k.deadKeys, op, id, q.kind(), q.armFlag())); err != nil {
		return 0, fmt.Errorf("prioq: %s dead letters of %q: %w", op, q.name, err)
	}
	return n, nil
}

// RequeueDead puts the dead message with this id back at the tail of its lane
// with 0 attempts, keeping its id. ErrNotFound when no dead message has it.
// One round trip; O(dead-letter list) inside Redis.
func (q *Queue) RequeueDead(ctx context.Context, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	n, err := q.deadOp(ctx, "requeue", id)
	if err == nil && n == 0 {
		err = fmt.Errorf("prioq: requeue %q in %q: %w", id, q.name, ErrNotFound)
	}
	return err
}

// RequeueAllDead requeues every dead message and returns how many. One round trip.
func (q *Queue) RequeueAllDead(ctx context.Context) (int, error) {
	return q.deadOp(ctx, "requeue", "")
}

// PurgeDead deletes every dead message, releasing their caller ids, and returns
// how many. One round trip.
func (q *Queue) PurgeDead(ctx context.Context) (int, error) {
	return q.deadOp(ctx, "purge", "")
}
