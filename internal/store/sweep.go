package store

import (
	"context"
	"fmt"
	"strconv"
)

// Sweep redelivers messages whose lease has expired (or dead-letters them past
// MaxAttempts), up to limit per call, and re-arms a lost wake-up. One round
// trip.
func (s *Shard) Sweep(ctx context.Context, limit int) (back, dead int, more bool, err error) {
	var res []int
	err = s.do(ctx, s.eval(sweepScript, &res, s.k.sweepKeys, strconv.Itoa(limit),
		strconv.Itoa(s.cfg.MaxAttempts), s.kind()))
	if err != nil {
		return 0, 0, false, fmt.Errorf("prioq: sweep %q: %w", s.name, err)
	}
	if len(res) != 3 {
		return 0, 0, false, fmt.Errorf("prioq: sweep %q: %w", s.name, ErrScript)
	}
	s.countFailures(ctx, countExpired, res[0])
	s.countFailures(ctx, countDead, res[1])
	return res[0], res[1], res[2] == 1, nil
}
