package prioq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// promote moves due delayed messages into their lanes, up to PromoteBatch, in
// one Lua call, by the Redis server's clock. It returns how many it moved,
// how long until the next due time (-1: nothing delayed) and the server's now
// (unix ms).
func (q *Queue) promote(ctx context.Context) (int, time.Duration, int64, error) {
	return q.promoteAt(ctx, "")
}

// promoteAt promotes what is due at nowMs ("" = the server's now); tests
// drive it with virtual time.
func (q *Queue) promoteAt(ctx context.Context, nowMs string) (int, time.Duration, int64, error) {
	var res []int64
	err := q.do(ctx, promoteScript.Cmd(&res, q.k.promoteKeys, nowMs,
		strconv.Itoa(q.cfg.PromoteBatch), q.armFlag(), q.kind()))
	if err != nil {
		return 0, 0, 0, fmt.Errorf("prioq: promote %q: %w", q.name, err)
	}
	if len(res) != 3 {
		return 0, 0, 0, fmt.Errorf("prioq: promote %q: %w", q.name, ErrScript)
	}
	next := time.Duration(-1)
	if res[1] >= 0 {
		next = time.Duration(res[1]) * time.Millisecond
	}
	return int(res[0]), next, res[2], nil
}

// nextDue reads the due time at the head of the delayed set (unix ms, server
// clock; -1: nothing delayed).
func (q *Queue) nextDue(ctx context.Context) (int64, error) {
	var head []string
	if err := q.do(ctx, radix.Cmd(&head, "ZRANGE", q.k.delayed, "0", "0", "WITHSCORES")); err != nil {
		return 0, fmt.Errorf("prioq: next due in %q: %w", q.name, err)
	}
	if len(head) < 2 {
		return -1, nil
	}
	f, err := strconv.ParseFloat(head[1], 64)
	if err != nil {
		return 0, fmt.Errorf("prioq: next due in %q: %w: score %q", q.name, ErrCorrupt, head[1])
	}
	return int64(f), nil
}

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
