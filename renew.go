package prioq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// renew.go: the end of a handler's context under Run (leaseCtl: the lease
// deadline, a renewal that found the lease lost or cancelled, the handler
// timeout) and the renewer, Run's one goroutine that keeps the leases of
// every delivery its handlers run alive: one call per shard per interval
// (store's Renew, renew.lua), whatever the number of handlers.

// minRenewEvery bounds the renewal interval below: a lease of MinDuration
// is renewed no more often than this.
const minRenewEvery = 5 * time.Millisecond

// renewEvery is the renewal interval for leases of length lease: a third of
// it, so that one renewal may fail and the next still comes in time.
func renewEvery(lease time.Duration) time.Duration { return max(lease/3, minRenewEvery) }

// leaseCtl ends a handler's context: at the lease deadline (a timer, so that
// Extend and the renewer can move it), or when a renewal finds the lease
// lost (ErrLeaseLost) or cancelled (ErrCancelled). Once ended, the context
// is over: Extend then fails rather than tell the handler the lease goes on
// (mu orders the two).
type leaseCtl struct {
	m      *Message
	live   context.Context // the handler's: renewed only while it lives (set before the renewer sees l)
	mu     sync.Mutex
	ended  bool
	timer  *time.Timer
	cancel context.CancelCauseFunc
}

// newLeaseCtl is the control of m's handler context, derived from base: it
// ends at m's lease deadline unless moved.
func newLeaseCtl(base context.Context, m *Message) (context.Context, *leaseCtl) {
	ctx, cancel := context.WithCancelCause(base)
	l := &leaseCtl{m: m, cancel: cancel}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = time.AfterFunc(time.Until(m.LeaseDeadline()), func() { l.end(ErrLeaseExpired) })
	return ctx, l
}

// end cancels the handler's context with cause, once.
func (l *leaseCtl) end(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended {
		l.ended = true
		l.cancel(cause)
	}
}

// stop releases the context and its timer once the handler returned.
func (l *leaseCtl) stop() {
	l.timer.Stop()
	l.cancel(nil)
}

// extend moves the deadline to d when it is later than the one recorded
// (zero d: only ask), and reports whether the context still runs.
func (l *leaseCtl) extend(d time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended && !d.IsZero() && d.After(l.m.LeaseDeadline()) {
		l.m.d.SetDeadline(d)
		l.timer.Reset(time.Until(d))
	}
	return !l.ended
}

// set moves the deadline to d, earlier or later (Extend: the lease in Redis
// is now exactly d; zero d: only ask), and reports whether the context
// still runs.
func (l *leaseCtl) set(d time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended && !d.IsZero() {
		l.m.d.SetDeadline(d)
		l.timer.Reset(time.Until(d))
	}
	return !l.ended
}

// renewSoon asks the renewer of a Run in progress to renew at once: a
// MultiConsumer heard that a delivery of a queue it serves was cancelled.
func (c *Consumer) renewSoon() {
	select {
	case c.renewNow <- struct{}{}:
	default: // asked already
	}
}

// renewer renews the leases of the deliveries Run's handlers run, every
// renewEvery(lease), in one call per shard.
type renewer struct {
	c     *Consumer
	lease time.Duration

	mu      sync.Mutex
	running map[*leaseCtl]struct{}
}

func newRenewer(c *Consumer) *renewer {
	return &renewer{c: c, lease: c.cfg.Lease, running: make(map[*leaseCtl]struct{})}
}

func (r *renewer) add(l *leaseCtl) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[l] = struct{}{}
}

func (r *renewer) remove(l *leaseCtl) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, l)
}

// run renews until ctx ends.
func (r *renewer) run(ctx context.Context) {
	t := time.NewTicker(renewEvery(r.lease))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.renew(ctx)
		case <-r.c.renewNow:
			r.renew(ctx)
		}
	}
}

// renew renews every lease running now, the shards at once. A shard whose
// call fails renews nothing this time: its handlers' contexts end at their
// deadlines unless a later renewal succeeds.
func (r *renewer) renew(ctx context.Context) {
	r.mu.Lock()
	byShard := make(map[*store.Shard][]*leaseCtl)
	for l := range r.running {
		if l.m.finished.Load() != 0 || l.live.Err() != nil {
			continue // finished by its handler, or the handler's context ended
		}
		byShard[l.m.shard()] = append(byShard[l.m.shard()], l)
	}
	r.mu.Unlock()
	if len(byShard) == 0 {
		return
	}
	var wg sync.WaitGroup
	for s, ls := range byShard {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.renewShard(ctx, s, ls)
		}()
	}
	wg.Wait()
}

func (r *renewer) renewShard(ctx context.Context, s *store.Shard, ls []*leaseCtl) {
	tokens := make([]string, len(ls))
	for i, l := range ls {
		tokens[i] = l.m.token()
	}
	// The call may take no longer than the interval: a late answer would
	// only hold up the next renewal.
	cctx, cancel := context.WithTimeout(ctx, min(r.c.qcfg.CallTimeout, renewEvery(r.lease)))
	defer cancel()
	deadline := time.Now().Add(r.lease) // no later than the server's: see take
	codes, err := s.Renew(cctx, tokens, r.lease)
	if err != nil {
		// A slot moving between cluster nodes refuses the call (TRYAGAIN)
		// until its move ends: routine, retried at the next interval, two
		// before the lease ends (the deadline timer stays the bound), and
		// not worth an OnError each time, as the fetch's own redirects.
		if ctx.Err() == nil && !store.MovedAway(err) {
			r.c.report(err)
		}
		return
	}
	for i, l := range ls {
		if l.m.finished.Load() != 0 {
			continue // finished by its handler meanwhile
		}
		switch codes[i] {
		case store.RenewOK:
			l.extend(deadline)
		case store.RenewCancelled:
			l.end(ErrCancelled)
		default:
			l.end(fmt.Errorf("prioq: renew %q: %w", l.m.ID, ErrLeaseLost))
		}
	}
}
