package prioq

import (
	"context"
	"log/slog"
)

// sweeper gives expired leases back (AtLeastOnce): every SweepInterval, with
// jitter so that many consumers do not sweep in step, it runs the sweep
// script until nothing expired is left, 256 leases per call; every few rounds
// it also puts the queue's meta key back if a restart lost it (keepMeta). Each
// call has a deadline, so one that hangs fails and the next interval tries
// again.
type sweeper struct {
	c *Consumer
}

// sweepBatch is how many expired leases one sweep call handles.
const sweepBatch = 256

// metaEvery is how many idle rounds of the sweeper (or of the promoter) go by
// between checks that the queue's meta key is still there.
const metaEvery = 6

// keepMeta puts the queue's meta key back if a restart without persistence
// lost it (open.lua writes it only when it is missing), so that Open keeps
// refusing a different configuration: every few rounds of the sweeper
// (AtLeastOnce) or of the promoter (AtMostOnce). A failure (a different
// configuration stored meanwhile, a full Redis) is reported and left to the
// next time.
func (c *Consumer) keepMeta(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, c.q.cfg.CallTimeout)
	defer cancel()
	if err := c.q.writeMeta(cctx); err != nil && ctx.Err() == nil {
		c.report(err)
	}
}

func (s *sweeper) run(ctx context.Context) {
	c := s.c
	for round := 0; sleepCtx(ctx, jitter(c.cfg.SweepInterval)); round++ {
		if round%metaEvery == 0 {
			c.keepMeta(ctx)
		}
		for {
			cctx, cancel := context.WithTimeout(ctx, c.q.cfg.CallTimeout)
			back, dead, more, err := c.q.sweep(cctx, sweepBatch)
			cancel()
			if (back > 0 || dead > 0) && c.cfg.OnSweep != nil {
				c.cfg.OnSweep(back, dead)
			}
			if back > 0 || dead > 0 {
				c.q.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "prioq: expired leases",
					slog.String("queue", c.q.name), slog.Int("redelivered", back), slog.Int("dead_lettered", dead))
			}
			if err != nil {
				if ctx.Err() == nil {
					c.report(err)
				}
				break
			}
			if !more {
				break
			}
		}
	}
}
