package consume

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// SweeperOptions configure a Sweeper (the root's ConsumerConfig holds them).
type SweeperOptions struct {
	// Interval is how often it sweeps (with jitter). 0: DefaultSweepInterval.
	Interval time.Duration
	// OnSweep, when set, is told of every sweep that did something.
	OnSweep func(redelivered, deadLettered int)
	// Swept, when set, gets a signal after every round (a test's).
	Swept chan<- struct{}
}

// DefaultSweepInterval is SweeperOptions.Interval's default (the root's
// DefaultSweepInterval: a root test keeps them equal).
const DefaultSweepInterval = 10 * time.Second

// Sweeper gives expired leases back (AtLeastOnce): every Interval, with
// jitter so that many consumers do not sweep in step, it runs the sweep
// script until nothing expired is left, SweepBatch leases per call; every few
// rounds it also puts the queue's meta key back if a restart lost it
// (KeepMeta). Each call has a deadline, so one that hangs fails and the next
// interval tries again.
type Sweeper struct {
	S         *store.Shard
	Opts      SweeperOptions
	Report    func(error)
	KeepsMeta bool // the queue's meta key is its to keep (shard 0)
}

// SweepBatch is how many expired leases one sweep call handles.
const SweepBatch = 256

// Run sweeps until ctx ends.
func (w *Sweeper) Run(ctx context.Context) {
	s, interval := w.S, w.Opts.Interval
	if interval <= 0 {
		interval = DefaultSweepInterval
	}
	for round := 0; sleepCtx(ctx, jitter(interval)); round++ {
		if w.KeepsMeta && round%MetaEvery == 0 {
			s.KeepMeta(ctx, w.Report)
		}
		SweepExpired(ctx, s, w.Opts.OnSweep, w.Report)
		signal(w.Opts.Swept)
	}
}

// SweepExpired gives every expired lease back, SweepBatch a call, each call
// with its own CallTimeout; it tells onSweep and the log what it did,
// reports its error, and returns how many it redelivered. The sweeper's and
// a MultiConsumer's probe's.
func SweepExpired(ctx context.Context, s *store.Shard, onSweep func(int, int), report func(error)) (redelivered int) {
	for {
		cctx, cancel := context.WithTimeout(ctx, s.Config().CallTimeout)
		back, dead, more, err := s.Sweep(cctx, SweepBatch)
		cancel()
		redelivered += back
		if (back > 0 || dead > 0) && onSweep != nil {
			onSweep(back, dead)
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

// Jitter spreads d over [0.75d, 1.25d) so many consumers do not act in step.
func Jitter(d time.Duration) time.Duration { return jitter(d) }

func jitter(d time.Duration) time.Duration {
	if d < 4 {
		return d
	}
	return d*3/4 + rand.N(d/2)
}
