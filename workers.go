package prioq

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// Worker is a running consumer (a Consumer or a MultiConsumer) as its last
// heartbeat in the worker registry described it (ConsumerConfig.Heartbeat).
// A consumer that closes leaves the registry a round trip later (Close sends
// its goodbye without waiting for it); one whose process died, or exited
// before the goodbye arrived, leaves it when its record expires, three
// heartbeats after the last.
type Worker struct {
	// ID is the consumer's id (Consumer.ID): random, new for each consumer.
	ID string
	// Kind is "consumer" for a Consumer, "multi" for a MultiConsumer.
	Kind string
	// Host, PID and Process name the process that runs it (os.Hostname,
	// os.Getpid, the base name of os.Args[0]).
	Host    string
	PID     int
	Process string
	// Holder is the id its process's lease tokens carry: a message in
	// flight whose LeasedMessage.Holder it is was taken by this process
	// (by this consumer or another of the process's).
	Holder string
	// Queues are the queues it serves, sorted; Pattern a MultiConsumer's.
	Queues  []string
	Pattern string
	// Concurrency is its ConsumerConfig.Concurrency: how many handlers Run
	// runs at most.
	Concurrency int
	// InFlight is how many handlers Run was running at the heartbeat.
	InFlight int
	// Delivered is how many messages it handed out (Receive, Run) since it
	// started.
	Delivered int64
	// Started is when it started (its process's clock); LastSeen its last
	// heartbeat and Expires when its record ends without another (Redis's
	// clock).
	Started, LastSeen, Expires time.Time
}

// HolderIn returns a worker of ws (a registry read by Workers) of the
// process that holder names (LeasedMessage.Holder, MessageStatus.Holder),
// and false when none: that process died, closed, or runs its consumers
// without a heartbeat.
func HolderIn(ws []Worker, holder string) (Worker, bool) {
	if holder != "" {
		for _, w := range ws {
			if w.Holder == holder {
				return w, true
			}
		}
	}
	return Worker{}, false
}

// Serves reports whether w serves the queue name.
func (w Worker) Serves(name string) bool {
	_, ok := slices.BinarySearch(w.Queues, name)
	return ok
}

// Workers returns the consumers registered on c, live ones only, sorted by
// host, process id and id. The registry's keys (prioq:workers:{w}:*) live in
// one slot of a cluster. A call whose ctx has no deadline gets
// DefaultCallTimeout.
func Workers(ctx context.Context, c Client) ([]Worker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	return readWorkers(ctx, c, DefaultCallTimeout)
}

// Workers returns the live consumers that serve q (Workers, filtered): an
// empty list while q has ready messages is a queue nobody works on.
func (q *Queue) Workers(ctx context.Context) ([]Worker, error) {
	all, err := readWorkers(ctx, q.shards[0].Client(), q.cfg.CallTimeout)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(w Worker) bool { return !w.Serves(q.name) }), nil
}

func readWorkers(ctx context.Context, c Client, timeout time.Duration) ([]Worker, error) {
	recs, _, err := store.Workers(ctx, c, timeout)
	if err != nil {
		return nil, err
	}
	out := make([]Worker, len(recs))
	for i, r := range recs {
		slices.Sort(r.Queues)
		out[i] = Worker{ID: r.ID, Kind: r.Kind, Host: r.Host, PID: r.PID, Process: r.Process, Holder: r.Holder,
			Queues: r.Queues, Pattern: r.Pattern, Concurrency: r.Concurrency, InFlight: r.InFlight,
			Delivered: r.Delivered, Started: time.UnixMilli(r.StartedMs),
			LastSeen: time.UnixMilli(r.ExpiresMs - r.TTLMs), Expires: time.UnixMilli(r.ExpiresMs)}
	}
	return out, nil
}

// ID returns the consumer's id: its name in the worker registry (Workers).
func (c *Consumer) ID() string { return c.id }

// workerStats are a consumer's counts that its heartbeat reports.
type workerStats struct {
	delivered atomic.Int64 // messages handed out
	running   atomic.Int64 // Run's handlers running
}

// heartbeat keeps a consumer's record in the worker registry: it writes it
// every Heartbeat, with the queue names when they changed (or were lost),
// and deletes it when its ctx ends (the consumer closes). A failure is
// reported once (again only when it changes) and the consumer goes on: the
// registry is for people, not for delivery.
type heartbeat struct {
	c       Client
	every   time.Duration
	timeout time.Duration
	rec     func() store.WorkerRecord
	queues  func() []string
	report  func(error)
}

func (h *heartbeat) run(ctx context.Context) {
	var sent []string // names the registry holds; nil: not known
	lastErr := ""
	for {
		names := h.queues()
		send := names
		if sent != nil && slices.Equal(names, sent) {
			send = nil
		}
		need, err := store.Heartbeat(ctx, h.c, h.timeout, 3*h.every, h.rec(), send)
		if err == nil && need {
			send = names
			_, err = store.Heartbeat(ctx, h.c, h.timeout, 3*h.every, h.rec(), send)
		}
		switch {
		case err == nil:
			lastErr = ""
			if send != nil {
				sent = send
			}
		case ctx.Err() != nil:
		default:
			sent = nil // the names may not have been written
			if err.Error() != lastErr {
				lastErr = err.Error()
				h.report(explainRegistry(err))
			}
		}
		if !sleepCtx(ctx, h.every) {
			break
		}
	}
	// The goodbye goes on its own, bounded: Close does not wait for it (a
	// server paused for writes, or slow, would hold Close up for a record
	// that expires anyway). A process that exits at once after Close may
	// leave its record until it expires.
	go func() {
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(h.timeout, 2*time.Second))
		defer cancel()
		_ = store.Goodbye(gctx, h.c, h.timeout, h.rec().ID)
	}()
}

func explainRegistry(err error) error {
	if strings.Contains(err.Error(), "NOPERM") {
		return fmt.Errorf("%w: the Redis user may not write its keys (grant ~prioq:workers:* and "+
			"+evalsha +eval, or set NoHeartbeat); the consumer works on without being listed: %w", ErrRegistry, err)
	}
	return fmt.Errorf("%w: the consumer works on without being listed: %w", ErrRegistry, err)
}

// startHeartbeat starts c's heartbeat unless NoHeartbeat. kind, pattern and
// queues describe what it serves.
func (c *Consumer) startHeartbeat(cl Client, kind, pattern string, queues func() []string) {
	if c.cfg.NoHeartbeat {
		return
	}
	host, _ := os.Hostname()
	started := time.Now().UnixMilli()
	h := &heartbeat{c: cl, every: c.cfg.Heartbeat, timeout: c.qcfg.CallTimeout, queues: queues,
		report: c.report,
		rec: func() store.WorkerRecord {
			return store.WorkerRecord{ID: c.id, Kind: kind, Host: host, PID: os.Getpid(),
				Process: filepath.Base(os.Args[0]), Holder: store.HolderID(), Pattern: pattern, Concurrency: c.cfg.Concurrency,
				InFlight: int(c.stats.running.Load()), Delivered: c.stats.delivered.Load(), StartedMs: started}
		}}
	c.goBackground(h.run)
}
