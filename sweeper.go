package prioq

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// sweeper gives expired leases back (AtLeastOnce): every SweepInterval, with
// jitter so that many consumers do not sweep in step, it runs the sweep
// script until nothing expired is left, 256 leases per call; every few rounds
// it also puts the queue's meta key back if a restart lost it (keepMeta). Each
// call has a deadline, so one that hangs fails and the next interval tries
// again.
type sweeper struct {
	s         *store.Shard
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
			s.KeepMeta(ctx, w.report)
		}
		sweepExpired(ctx, s, w.cfg, w.report)
	}
}

// sweepExpired gives every expired lease back, sweepBatch a call, each call
// with its own CallTimeout; it tells cfg.OnSweep and the log what it did,
// report its error, and returns how many it redelivered. The sweeper's and a
// MultiConsumer's probe's (multi.go).
func sweepExpired(ctx context.Context, s *store.Shard, cfg *ConsumerConfig, report func(error)) (redelivered int) {
	for {
		cctx, cancel := context.WithTimeout(ctx, s.Config().CallTimeout)
		back, dead, more, err := s.Sweep(cctx, sweepBatch)
		cancel()
		redelivered += back
		if (back > 0 || dead > 0) && cfg.OnSweep != nil {
			cfg.OnSweep(back, dead)
		}
		if back > 0 || dead > 0 {
			s.Config().Logger.LogAttrs(ctx, slog.LevelInfo, "prioq: expired leases",
				slog.String("queue", s.Name()), slog.Int("redelivered", back), slog.Int("dead_lettered", dead))
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
