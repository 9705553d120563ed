package prioq

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// ScheduledMessage is a delayed message: what Queue.Scheduled returns.
type ScheduledMessage struct {
	MessageInfo
	// Due is when it becomes ready (the server's clock).
	Due time.Time
}

// LeasedMessage is a message in flight (AtLeastOnce): what Queue.Leased
// returns.
type LeasedMessage struct {
	MessageInfo
	// LeaseDeadline is when its lease ends unless acked, retried or
	// extended; TakenAt when its current delivery was taken (the server's
	// clock). Attempts counts the deliveries before this one.
	LeaseDeadline, TakenAt time.Time
}

// Scheduled returns up to n (at most MaxBatch) of the delayed messages,
// soonest due first, from the start-th on: a page of them. Reading is not
// atomic: a message promoted meanwhile is left out, and a record that does
// not decode is skipped and logged. On a queue of several shards each shard's
// first start+n are read and merged.
func (q *Queue) Scheduled(ctx context.Context, start, n int) ([]ScheduledMessage, error) {
	if start < 0 || n < 1 {
		return nil, fmt.Errorf("%w: Scheduled(%d, %d)", ErrInvalidOption, start, n)
	}
	return browse(q, "delayed", start, n, func(s *store.Shard, from, k int) ([]ScheduledMessage, store.Browsed, error) {
		page, b, err := s.Scheduled(ctx, from, k)
		out := make([]ScheduledMessage, len(page))
		for i, m := range page {
			out[i] = ScheduledMessage{MessageInfo(m.Info), m.Due}
		}
		return out, b, err
	}, func(a, b ScheduledMessage) int { return a.Due.Compare(b.Due) })
}

// Leased returns up to n (at most MaxBatch) of the messages in flight, the
// soonest lease deadline first, from the start-th on (AtLeastOnce; an
// AtMostOnce queue has none). As Scheduled, not atomic.
func (q *Queue) Leased(ctx context.Context, start, n int) ([]LeasedMessage, error) {
	if start < 0 || n < 1 {
		return nil, fmt.Errorf("%w: Leased(%d, %d)", ErrInvalidOption, start, n)
	}
	return browse(q, "in flight", start, n, func(s *store.Shard, from, k int) ([]LeasedMessage, store.Browsed, error) {
		page, b, err := s.LeasedPage(ctx, from, k)
		out := make([]LeasedMessage, len(page))
		for i, m := range page {
			out[i] = LeasedMessage{MessageInfo(m.Info), m.Deadline, m.TakenAt}
		}
		return out, b, err
	}, func(a, b LeasedMessage) int { return a.LeaseDeadline.Compare(b.LeaseDeadline) })
}

// browse reads a page of one state of every shard and merges them by order.
func browse[T any](q *Queue, what string, start, n int,
	read func(s *store.Shard, from, k int) ([]T, store.Browsed, error), order func(a, b T) int) ([]T, error) {
	n = min(n, MaxBatch)
	from, k := start, n
	if len(q.shards) > 1 {
		from, k = 0, start+n
	}
	per := make([][]T, len(q.shards))
	broken := make([][]string, len(q.shards))
	err := q.eachShard(func(i int, s *store.Shard) error {
		page, b, err := read(s, from, k)
		per[i], broken[i] = page, b.Broken
		return err
	})
	if err != nil {
		return nil, err
	}
	if bad := slices.Concat(broken...); len(bad) > 0 {
		q.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "prioq: records that do not decode, skipped",
			slog.String("queue", q.name), slog.String("state", what), slog.Any("ids", bad))
	}
	if len(q.shards) == 1 {
		return per[0], nil
	}
	all := slices.Concat(per...)
	slices.SortStableFunc(all, order)
	if start >= len(all) {
		return nil, nil
	}
	return all[start:min(start+n, len(all))], nil
}

// RunNow makes the delayed message id ready at once, in its place among the
// ready messages of its priority as if it had just become due (its group's
// turn, with a group), instead of waiting for its due time. ErrNotFound when
// no delayed message has that id (never delayed, promoted already, cancelled).
// Its due time is moved first, then the due messages are promoted: when the
// second step fails RunNow returns its error, and the message, due now, is
// promoted by any consumer's promoter in its next round.
func (q *Queue) RunNow(ctx context.Context, id string) error {
	if err := store.ValidateID(id); err != nil {
		return err
	}
	for _, s := range q.shards {
		ok, err := s.RunNow(ctx, id)
		if ok || err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: no delayed message %q in %q", ErrNotFound, id, q.name)
}
