package prioq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// retain.go: what a finished message leaves behind (Config.Retain), the
// result its handler gives it (Message.SetResult), the wait for it
// (Queue.WaitResult), and the progress a handler reports (Message.Progress).
// The Redis half is internal/store's retain.go.

// Result is the record of a finished message (Queue.Result).
type Result struct {
	// ID is the message's id.
	ID string

	// Outcome is OutcomeAcked or OutcomeDeadLettered.
	Outcome Outcome

	// Attempts counts its deliveries, the last one included.
	Attempts int

	// EnqueuedAt is when it was enqueued (the producer's clock), FinishedAt
	// when its ack or dead-lettering ran (the server's).
	EnqueuedAt, FinishedAt time.Time

	// Error is a dead-lettered message's last error.
	Error string

	// Value is what its handler gave Message.SetResult (nil for none).
	Value []byte
}

// SetResult gives the message a result, written with its ack: the ack that
// ends the lease writes it in the same atomic step, so a handler whose lease
// was lost writes nothing (its ack fails with ErrLeaseLost). Queue.Result
// and Queue.WaitResult read it. Under Run, call it before returning nil; the
// last call wins. Without Config.Retain the record is kept under
// DefaultRetention. An AtMostOnce message has no ack: SetResult is then
// ErrWrongMode.
func (m *Message) SetResult(b []byte) error {
	if err := m.leased(); err != nil {
		return err
	}
	m.result, m.hasResult = append([]byte{}, b...), true
	return nil
}

// keepsRecord reports whether m's ack writes a finished record (finish.lua)
// rather than going the plain way (a pipeline, or on a take).
func (m *Message) keepsRecord() bool {
	return m.hasResult || m.shard().Config().Retain.Max > 0
}

// alone reports whether m's ack must not ride on a take (run.go): it writes
// a record, or drops the delivery's progress after.
func (m *Message) alone() bool { return m.keepsRecord() || m.progressed.Load() }

// finishRecord is the record m's ack or dead-lettering writes.
func (m *Message) finishRecord(outcome, reason string) store.Finish {
	return store.Finish{Outcome: outcome, Attempts: m.Attempts, Enqueued: m.EnqueuedAt, Error: reason, Result: m.result}
}

// ackKeeping is Ack for a message that keeps a record (keepsRecord).
func (m *Message) ackKeeping(ctx context.Context) error {
	cfg := m.shard().Config()
	keep := cfg.Retain
	if keep.Max == 0 {
		keep = cfg.Results
	}
	return m.d.Shard().AckFinish(ctx, m.d.Req(), m.finishRecord(store.RecordAcked, ""), keep)
}

// keepDead writes the record of m, dead-lettered with reason, when its queue
// retains finished messages. The dead-lettering stands whatever this does.
func (m *Message) keepDead(ctx context.Context, reason string) {
	cfg := m.shard().Config()
	if cfg.Retain.Max == 0 {
		return
	}
	if err := m.d.Shard().KeepRecord(ctx, m.ID, m.finishRecord(store.RecordDead, reason), cfg.Retain); err != nil {
		cfg.Logger.WarnContext(ctx, "prioq: keeping a dead letter's record", "queue", m.Queue(), "id", m.ID, "error", err)
	}
}

// dropProgress deletes what Progress recorded of m's delivery, once it
// ended without finish.lua (which deletes it itself); best effort: the
// record expires an hour after the lease anyway.
func (m *Message) dropProgress(ctx context.Context) {
	if m.progressed.Load() {
		m.d.Shard().DropProgress(ctx, m.d.Token())
	}
}

// Progress records how far the handler got: pct (0..100) and a note, shown
// by Queue.Message, prioq show and the dashboard while the message is in
// flight. Fenced by the lease: ErrLeaseLost, recording nothing, once the
// lease is gone. One round trip. The record lives until the delivery is
// acked, else an hour past the lease deadline it saw (each call moves it).
func (m *Message) Progress(ctx context.Context, pct int, note string) error {
	if err := m.leased(); err != nil {
		return err
	}
	if pct < 0 || pct > 100 {
		return fmt.Errorf("%w: Progress(%d): want 0..100", ErrInvalidOption, pct)
	}
	if len(note) > maxProgressNote {
		return fmt.Errorf("%w: a progress note of %d bytes (at most %d)", ErrInvalidOption, len(note), maxProgressNote)
	}
	m.progressed.Store(true)
	ok, err := m.d.Shard().Progress(ctx, m.d.Token(), pct, note)
	if err != nil {
		return fmt.Errorf("prioq: progress %q: %w", m.ID, err)
	}
	if !ok {
		return fmt.Errorf("prioq: progress %q: %w", m.ID, ErrLeaseLost)
	}
	return nil
}

// maxProgressNote bounds a progress note.
const maxProgressNote = 1024

// Result reads the record of finished message id: ErrNotFound when there is
// none (not finished, its queue retains nothing and it had no result, or
// trimmed). O(1) per shard searched (the id's, or every shard for an id of
// the caller's on a queue of several).
func (q *Queue) Result(ctx context.Context, id string) (Result, error) {
	if err := store.ValidateID(id); err != nil {
		return Result{}, err
	}
	shards := q.shardsFor(id)
	recs := make([]store.Record, len(shards))
	oks := make([]bool, len(shards))
	err := store.Each(shards, func(i int, s *store.Shard) (err error) {
		recs[i], oks[i], err = s.Finished(ctx, id)
		return err
	})
	for i, ok := range oks {
		if ok {
			return resultOf(id, recs[i]), nil
		}
	}
	if err != nil {
		return Result{}, err
	}
	return Result{}, fmt.Errorf("%w: no finished message %q in %q", ErrNotFound, id, q.name)
}

func resultOf(id string, r store.Record) Result {
	o := OutcomeAcked
	if r.Outcome == store.RecordDead {
		o = OutcomeDeadLettered
	}
	return Result{ID: id, Outcome: o, Attempts: r.Attempts, EnqueuedAt: r.Enqueued, FinishedAt: r.Finished,
		Error: r.Error, Value: r.Result}
}

// waitSlice bounds one blocking wait of WaitResult: between two it reads
// the record again.
const waitSlice = 2 * time.Second

// WaitResult waits until message id finishes with a record (Result), then
// returns it; ctx's error if ctx ends first. It does not poll: it blocks on
// a list the ack pushes to (BLPOP), and reads the record before each wait,
// so a message finished before the call is returned at once. Each wait
// holds a connection of the client's pool (one per shard searched) for up
// to two seconds: size the pool for the waiters plus the other calls. A
// message whose queue does not retain records and that gets no result, or
// that is dead-lettered without Config.Retain, is never announced: the wait
// ends with ctx.
func (q *Queue) WaitResult(ctx context.Context, id string) (Result, error) {
	for {
		r, err := q.Result(ctx, id)
		if !errors.Is(err, ErrNotFound) {
			return r, err
		}
		d := waitSlice
		if dl, ok := ctx.Deadline(); ok {
			d = min(d, time.Until(dl))
		}
		if d <= 0 || ctx.Err() != nil {
			return Result{}, fmt.Errorf("prioq: waiting for %q in %q: %w", id, q.name, context.Cause(ctx))
		}
		if err := q.waitFinished(ctx, id, max(d, time.Millisecond)); err != nil {
			if ctx.Err() != nil {
				return Result{}, fmt.Errorf("prioq: waiting for %q in %q: %w", id, q.name, context.Cause(ctx))
			}
			return Result{}, err
		}
	}
}

// waitFinished blocks until a shard that may hold id announces its finish,
// or d passed: every shard that may hold it at once, the first to answer
// ends the others.
func (q *Queue) waitFinished(ctx context.Context, id string, d time.Duration) error {
	shards := q.shardsFor(id)
	if len(shards) == 1 {
		_, err := shards[0].WaitFinished(ctx, id, d)
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(shards))
	for i, s := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, err := s.WaitFinished(wctx, id, d); ok {
				cancel()
			} else if wctx.Err() == nil {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
