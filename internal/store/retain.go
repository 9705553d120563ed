package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// retain.go: finished messages kept by id (their outcome and result), the
// wake-up of callers waiting for one, and the progress of a delivery; the
// Redis half of the root's Config.Retain, Message.SetResult,
// Queue.Result, Queue.WaitResult and Message.Progress.

// Keep bounds the finished records of a shard: at most Max, none older than
// For. Each write trims at most trimBudget records by age and as many by
// count, so the bounds hold exactly after each write unless they were
// lowered by more than that.
type Keep struct {
	Max int
	For time.Duration
}

// trimBudget is how many records one finish.lua call removes at most per
// bound.
const trimBudget = 100

// Outcomes of a finished record.
const (
	RecordAcked = "a"
	RecordDead  = "d"
)

// Record is a finished message's record.
type Record struct {
	Outcome            string // RecordAcked or RecordDead
	Attempts           int
	Enqueued, Finished time.Time
	Until              time.Time // readers ignore it after this
	Error              string
	Result             []byte
}

// Finish is what finish.lua writes of a message: its id and the record's
// fields known before the write (the server adds the times).
type Finish struct {
	Outcome  string
	Attempts int
	Enqueued time.Time
	Error    string
	Result   []byte
}

func (f Finish) args(keep Keep) (head, tail string, rest []string) {
	head = f.Outcome + "|" + strconv.Itoa(f.Attempts) + "|" + strconv.FormatInt(f.Enqueued.UnixMilli(), 10) + "|"
	tail = strconv.Itoa(len(f.Error)) + "|" + f.Error + string(f.Result)
	return head, tail, []string{fmtInt(keep.For.Milliseconds()), strconv.Itoa(keep.Max), strconv.Itoa(trimBudget)}
}

// finishKeys are finish.lua's KEYS for message id and lease token tok.
func (s *Shard) finishKeys(id, tok string) []string {
	return []string{s.k.leases, s.k.inflight, s.k.ids, s.k.counts, s.k.wake, s.k.lanes[0],
		s.k.done, s.k.res, s.k.reply(id), s.k.prog(tok)}
}

// AckFinish ends the lease of r and writes f as the message's finished
// record in the same script (finish.lua): nothing is written unless the
// lease was current. Its error: nil, ErrLeaseLost, ErrNotReplicated, or the
// call's.
func (s *Shard) AckFinish(ctx context.Context, r AckReq, f Finish, keep Keep) error {
	caller := ""
	if r.Caller {
		caller = r.ID
	}
	head, tail, rest := f.args(keep)
	args := append([]string{s.kind(), strconv.Itoa(len(s.k.lanes)), r.Token, r.ID, caller, r.Group, head, tail}, rest...)
	var won int
	err := s.write(ctx, s.eval(finishScript, &won, s.finishKeys(r.ID, r.Token), args...))
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return fmt.Errorf("prioq: ack %q: %w", r.ID, err)
	}
	if won == 0 {
		return fmt.Errorf("prioq: ack %q: %w", r.ID, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("prioq: ack %q: %w", r.ID, err)
	}
	return nil
}

// KeepRecord writes f as the finished record of message id, whose lease
// another call ended (a dead-lettering), and wakes its waiters.
func (s *Shard) KeepRecord(ctx context.Context, id string, f Finish, keep Keep) error {
	head, tail, rest := f.args(keep)
	args := append([]string{s.kind(), strconv.Itoa(len(s.k.lanes)), "", id, "", "", head, tail}, rest...)
	if err := s.write(ctx, s.eval(finishScript, nil, s.finishKeys(id, ""), args...)); err != nil {
		return fmt.Errorf("prioq: keeping the record of %q in %q: %w", id, s.name, err)
	}
	return nil
}

// Finished reads the finished record of id: false when there is none, or
// it is past its time (on this host's clock: a record's last moments may
// be read or missed by a host whose clock is off).
func (s *Shard) Finished(ctx context.Context, id string) (Record, bool, error) {
	var raw []byte
	if err := s.do(ctx, radix.Cmd(&raw, "HGET", s.k.res, id)); err != nil || raw == nil {
		if err = dropWrongType(err); err != nil {
			err = fmt.Errorf("prioq: finished record of %q in %q: %w", id, s.name, err)
		}
		return Record{}, false, err
	}
	rec, err := parseRecord(raw)
	if err != nil {
		return Record{}, false, fmt.Errorf("prioq: finished record of %q in %q: %w", id, s.name, err)
	}
	if time.Now().After(rec.Until) {
		return Record{}, false, nil
	}
	return rec, true, nil
}

// parseRecord decodes "outcome|attempts|enqueued|finished|until|errlen|"
// error result.
func parseRecord(raw []byte) (Record, error) {
	var f [6]string
	rest := string(raw)
	for i := range f {
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, "|"); !ok {
			return Record{}, fmt.Errorf("%w: a finished record of %d bytes", ErrCorrupt, len(raw))
		}
	}
	var n [5]int64
	for i := 1; i < 6; i++ {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return Record{}, fmt.Errorf("%w: a finished record's field %d is %q", ErrCorrupt, i, f[i])
		}
		n[i-1] = v
	}
	if n[4] < 0 || int(n[4]) > len(rest) {
		return Record{}, fmt.Errorf("%w: a finished record's error has length %d of %d", ErrCorrupt, n[4], len(rest))
	}
	r := Record{Outcome: f[0], Attempts: int(n[0]), Enqueued: time.UnixMilli(n[1]),
		Finished: time.UnixMilli(n[2]), Until: time.UnixMilli(n[3]), Error: rest[:n[4]]}
	if res := rest[n[4]:]; res != "" {
		r.Result = []byte(res)
	}
	return r, nil
}

// WaitFinished blocks until message id's finish is announced (BLPOP on its
// reply list), at most d: true when one came. It holds a connection of the
// pool meanwhile. The element is pushed back, so that every waiter wakes.
func (s *Shard) WaitFinished(ctx context.Context, id string, d time.Duration) (bool, error) {
	var got []string
	key := s.k.reply(id)
	cctx, cancel := context.WithTimeout(ctx, d+s.cfg.CallTimeout)
	defer cancel()
	if err := s.c.Do(cctx, radix.Cmd(&got, "BLPOP", key, fmtSeconds(d))); err != nil {
		return false, fmt.Errorf("prioq: waiting for %q in %q: %w", id, s.name, err)
	}
	if len(got) == 0 {
		return false, nil
	}
	p := radix.NewPipeline()
	p.Append(radix.Cmd(nil, "LPUSH", key, replyMark))
	p.Append(radix.Cmd(nil, "PEXPIRE", key, strconv.Itoa(replyTTLMs)))
	_ = s.do(ctx, p) // the others' wake-up only: they poll the record anyway
	return true, nil
}

// Progress records p and note as the progress of the delivery of token
// (progress.lua): false when its lease is gone.
func (s *Shard) Progress(ctx context.Context, token string, p int, note string) (bool, error) {
	var ok int
	err := s.do(ctx, progressScript.Cmd(&ok, []string{s.k.leases, s.k.prog(token)}, token, strconv.Itoa(p), note,
		strconv.FormatInt(time.Hour.Milliseconds(), 10)))
	if err != nil {
		return false, fmt.Errorf("prioq: progress of %q: %w", s.name, err)
	}
	return ok == 1, nil
}

// Progressed is what the delivery of token last reported with Progress:
// percent, when (server clock), note; ok false for nothing.
type Progressed struct {
	Percent int
	At      time.Time
	Note    string
}

// ProgressOf reads the progress of the delivery of token.
func (s *Shard) ProgressOf(ctx context.Context, token string) (Progressed, bool, error) {
	var raw *string
	if err := s.do(ctx, radix.Cmd(&raw, "GET", s.k.prog(token))); err != nil || raw == nil {
		return Progressed{}, false, dropWrongType(err)
	}
	pct, rest, _ := strings.Cut(*raw, "|")
	at, note, _ := strings.Cut(rest, "|")
	p, err1 := strconv.Atoi(pct)
	ms, err2 := strconv.ParseInt(at, 10, 64)
	if err1 != nil || err2 != nil {
		return Progressed{}, false, nil
	}
	return Progressed{Percent: p, At: time.UnixMilli(ms), Note: note}, true, nil
}

// DropProgress deletes the progress of the delivery of token, best effort.
func (s *Shard) DropProgress(ctx context.Context, token string) {
	_ = s.do(ctx, radix.Cmd(nil, "DEL", s.k.prog(token)))
}
