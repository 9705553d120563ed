package prioq

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"
)

// sweeper gives expired leases back (AtLeastOnce): every SweepInterval, with
// jitter so that many consumers do not sweep in step, it runs the sweep
// script until nothing expired is left, 256 leases per call; every few rounds
// it also puts the queue's meta key back if a restart lost it (keepMeta). Each
// call has a deadline, so one that hangs fails and the next interval tries
// again.
type sweeper struct {
	s         *shard
	cfg       *ConsumerConfig // its consumer's: SweepInterval, OnSweep
	report    func(error)
	keepsMeta bool // the queue's meta key is its to keep (shard 0)
}

// sweepBatch is how many expired leases one sweep call handles.
const sweepBatch = 256

func (w *sweeper) run(ctx context.Context) {
	s := w.s
	for round := 0; sleepCtx(ctx, jitter(w.cfg.SweepInterval)); round++ {
		if w.keepsMeta && round%metaEvery == 0 {
			s.keepMeta(ctx, w.report)
		}
		s.sweepExpired(ctx, w.cfg, w.report)
	}
}

// sweepExpired gives every expired lease back, sweepBatch a call, each call
// with its own CallTimeout; it tells cfg.OnSweep and the log what it did,
// report its error, and returns how many it redelivered. The sweeper's and a
// MultiConsumer's probe's (multi.go).
func (s *shard) sweepExpired(ctx context.Context, cfg *ConsumerConfig, report func(error)) (redelivered int) {
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		back, dead, more, err := s.sweep(cctx, sweepBatch)
		cancel()
		redelivered += back
		if (back > 0 || dead > 0) && cfg.OnSweep != nil {
			cfg.OnSweep(back, dead)
		}
		if back > 0 || dead > 0 {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "prioq: expired leases",
				slog.String("queue", s.name), slog.Int("redelivered", back), slog.Int("dead_lettered", dead))
		}
		if err != nil {
			if ctx.Err() == nil {
				report(err)
			}
			return redelivered
		}
		if !more {
			return redelivered
		}
	}
}

// jitter spreads d over [0.75d, 1.25d) so many consumers do not sweep in step.
func jitter(d time.Duration) time.Duration {
	if d < 4 {
		return d
	}
	return d*3/4 + rand.N(d/2)
}

// sweep redelivers messages whose lease has expired (or dead-letters them past
// MaxAttempts), up to limit per call, and re-arms a lost wake-up. One round
// trip.
func (s *shard) sweep(ctx context.Context, limit int) (back, dead int, more bool, err error) {
	var res []int
	err = s.do(ctx, s.eval(sweepScript, &res, s.k.sweepKeys, strconv.Itoa(limit),
		strconv.Itoa(s.cfg.MaxAttempts), s.kind()))
	if err != nil {
		return 0, 0, false, fmt.Errorf("prioq: sweep %q: %w", s.name, err)
	}
	if len(res) != 3 {
		return 0, 0, false, fmt.Errorf("prioq: sweep %q: %w", s.name, ErrScript)
	}
	return res[0], res[1], res[2] == 1, nil
}
