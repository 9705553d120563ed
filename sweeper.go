package prioq

import "context"

// sweeper gives expired leases back (AtLeastOnce): every SweepInterval, with
// jitter so that many consumers do not sweep in step, it runs the sweep
// script until nothing expired is left, 256 leases per call; every few rounds
// it also puts the queue's meta key back if a restart lost it. Each call has a
// deadline, so one that hangs fails and the next interval tries again.
type sweeper struct {
	c *Consumer
}

// sweepBatch is how many expired leases one sweep call handles.
const sweepBatch = 256

// metaEvery is how many idle rounds of the sweeper (or of the promoter) go by
// between checks that the queue's meta key is still there.
const metaEvery = 6

func (s *sweeper) run(ctx context.Context) {
	c := s.c
	for round := 0; sleepCtx(ctx, jitter(c.cfg.SweepInterval)); round++ {
		for {
			cctx, cancel := context.WithTimeout(ctx, c.q.cfg.CallTimeout)
			_, _, more, err := c.q.sweep(cctx, sweepBatch, round%metaEvery == 0)
			cancel()
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
