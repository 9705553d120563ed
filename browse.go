package prioq

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
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
	// Holder names the process that took it: the Holder of its consumers
	// in the worker registry (Workers), which says its host and process id.
	// A holder no live worker names is a process that died or closed
	// without giving it back: the lease ends at LeaseDeadline and the
	// message is delivered again. "" for a message taken by a version of
	// prioq before holders were named.
	Holder string
}

// Scheduled returns up to n (at most MaxBatch) of the delayed messages,
// soonest due first, from the start-th on: a page of them. Reading is not
// atomic: a message promoted meanwhile is left out, and a record that does
// not decode is skipped and logged. On a queue of several shards the due
// times of each shard's first start+n are read and merged, and only the
// page's records.
func (q *Queue) Scheduled(ctx context.Context, start, n int) ([]ScheduledMessage, error) {
	if start < 0 || n < 1 {
		return nil, fmt.Errorf("%w: Scheduled(%d, %d)", ErrInvalidOption, start, n)
	}
	return browse(ctx, q, "delayed", start, n,
		func(s *store.Shard, from, k int) (store.Index, error) { return s.ScheduledIndex(ctx, from, k) },
		func(s *store.Shard, ix store.Index) ([]ScheduledMessage, store.Browsed, error) {
			page, b, err := s.ScheduledOf(ctx, ix)
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
	return browse(ctx, q, "in flight", start, n,
		func(s *store.Shard, from, k int) (store.Index, error) { return s.LeasedIndex(ctx, from, k) },
		func(s *store.Shard, ix store.Index) ([]LeasedMessage, store.Browsed, error) {
			page, b, err := s.LeasedOf(ctx, ix)
			out := make([]LeasedMessage, len(page))
			for i, m := range page {
				out[i] = LeasedMessage{MessageInfo(m.Info), m.Deadline, m.TakenAt, m.Holder}
			}
			return out, b, err
		}, func(a, b LeasedMessage) int { return a.LeaseDeadline.Compare(b.LeaseDeadline) })
}

// browse reads a page of one state: its index (members and times), then
// the records of the page alone. On a queue of several shards the indexes
// of every shard's first start+n are merged by time (ties: shard, then
// place) to find the page.
func browse[T any](ctx context.Context, q *Queue, what string, start, n int,
	index func(s *store.Shard, from, k int) (store.Index, error),
	records func(s *store.Shard, ix store.Index) ([]T, store.Browsed, error), order func(a, b T) int) ([]T, error) {
	n = min(n, MaxBatch)
	pages := make([]store.Index, len(q.shards))
	if len(q.shards) == 1 {
		ix, err := index(q.shards[0], start, n)
		if err != nil {
			return nil, err
		}
		pages[0] = ix
	} else {
		k := n + min(start, math.MaxInt-n) // no overflow: a page that far is empty
		idx := make([]store.Index, len(q.shards))
		if err := q.eachShard(func(i int, s *store.Shard) (err error) {
			idx[i], err = index(s, 0, k)
			return err
		}); err != nil {
			return nil, err
		}
		type at struct{ shard, i int }
		var all []at
		for sh, ix := range idx {
			for i := range ix.Members {
				all = append(all, at{sh, i})
			}
		}
		slices.SortStableFunc(all, func(a, b at) int {
			return cmp.Or(cmp.Compare(idx[a.shard].Scores[a.i], idx[b.shard].Scores[b.i]), cmp.Compare(a.shard, b.shard), cmp.Compare(a.i, b.i))
		})
		if start >= len(all) {
			return nil, nil
		}
		all = all[start : start+min(n, len(all)-start)] // no start+n: it may overflow
		if len(all) == 0 {
			return nil, nil
		}
		// Each shard's part of the page, in its own order (the merged
		// order restricted to one shard).
		for _, p := range all {
			pages[p.shard].Members = append(pages[p.shard].Members, idx[p.shard].Members[p.i])
			pages[p.shard].Scores = append(pages[p.shard].Scores, idx[p.shard].Scores[p.i])
		}
		per := make([][]T, len(q.shards))
		broken := make([][]string, len(q.shards))
		if err := q.eachShard(func(i int, s *store.Shard) error {
			if len(pages[i].Members) == 0 {
				return nil
			}
			page, b, err := records(s, pages[i])
			per[i], broken[i] = page, b.Broken
			return err
		}); err != nil {
			return nil, err
		}
		logBroken(q, what, broken)
		// The same merge again on what was read: shard 0's first, then a
		// stable sort by time, is (time, shard, place).
		out := slices.Concat(per...)
		slices.SortStableFunc(out, order)
		return out, nil
	}
	page, b, err := records(q.shards[0], pages[0])
	if err != nil {
		return nil, err
	}
	logBroken(q, what, [][]string{b.Broken})
	return page, nil
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

// logBroken logs the records of a browse that did not decode.
func logBroken(q *Queue, what string, broken [][]string) {
	if bad := slices.Concat(broken...); len(bad) > 0 {
		q.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "prioq: records that do not decode, skipped",
			slog.String("queue", q.name), slog.String("state", what), slog.Any("ids", bad))
	}
}
