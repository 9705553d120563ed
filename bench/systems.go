package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// A system under test. Payloads are 64 bytes: 8 bytes of enqueue time (unix
// ns), 8 of sequence number, 1 of priority level, then filler; handlers read
// them back to measure latency, duplicates and priority order.
type system interface {
	Name() string
	// Reliable says whether a consumer crash can lose a message.
	Reliable() bool
	// Priorities says whether it serves higher priorities first.
	Priorities() bool
	// Delays says whether EnqueueAt works.
	Delays() bool
	Prepare(ctx context.Context) error
	Enqueue(ctx context.Context, level int, payload []byte) error
	EnqueueBatch(ctx context.Context, levels []int, payloads [][]byte) error
	EnqueueAt(ctx context.Context, level int, payload []byte, due time.Time) error
	// Consume runs `workers` consumers until ctx is done, calling handle for
	// every message (from many goroutines), taking `batch` per call where the
	// system can. It returns when every consumer has stopped.
	Consume(ctx context.Context, workers, batch int, handle func(payload []byte)) error
	Cleanup(ctx context.Context)
}

const levels = 3

var errUnsupported = errors.New("unsupported")

func makePayload(seq uint64, level int) []byte {
	p := make([]byte, 64)
	binary.BigEndian.PutUint64(p, uint64(time.Now().UnixNano()))
	binary.BigEndian.PutUint64(p[8:], seq)
	p[16] = byte(level)
	for i := 17; i < 64; i++ {
		p[i] = 'x'
	}
	return p
}

func payloadTime(p []byte) time.Time { return time.Unix(0, int64(binary.BigEndian.Uint64(p))) }
func payloadSeq(p []byte) uint64     { return binary.BigEndian.Uint64(p[8:]) }
func payloadLevel(p []byte) int      { return int(p[16]) }

// ---- prioq ----------------------------------------------------------------

type prioqSystem struct {
	c      radix.Client
	name   string
	layout prioq.Layout
	mode   prioq.Mode
	qname  string
	q      *prioq.Queue
	prio   func(level int) int64
	// run, when above 0, makes Consume use Run on this many consumers
	// (Concurrency workers/run each): the shape users run, with batched
	// fetches and acks. 0: single Receive/Ack calls.
	run int
	// enqueueMW and handlerMW instrument the queue (see newPrioqRunWith).
	enqueueMW func(queue string) prioq.EnqueueMiddleware
	handlerMW prioq.Middleware
	// groups, when above 0, puts the messages in this many groups, in turn
	// (prioq.Group): the cost of groups beside the same queue without.
	groups int
	next   atomic.Uint64
}

// newPrioqGroups is the levels, AtLeastOnce system with its messages in
// `groups` groups.
func newPrioqGroups(c radix.Client, groups int) *prioqSystem {
	s := newPrioq(c, false, prioq.AtLeastOnce)
	s.groups = groups
	s.name = fmt.Sprintf("prioq levels reliable, groups=%d", groups)
	return s
}

// opts are the options of one enqueue at level.
func (s *prioqSystem) opts(level int, more ...prioq.Option) []prioq.Option {
	o := append([]prioq.Option{prioq.Priority(s.prio(level))}, more...)
	if s.groups > 0 {
		o = append(o, prioq.Group(strconv.FormatUint(s.next.Add(1)%uint64(s.groups), 10)))
	}
	return o
}

// newPrioqRunWith is newPrioqRun(c, 1) with middleware on both sides: what
// instrumentation costs end to end, beside the same system without it.
func newPrioqRunWith(c radix.Client, what string, enq func(queue string) prioq.EnqueueMiddleware, h prioq.Middleware) *prioqSystem {
	s := newPrioqRun(c, 1)
	s.name += ", " + what
	s.enqueueMW, s.handlerMW = enq, h
	return s
}

// newPrioqRun is the levels, AtLeastOnce system consumed by Run on
// `consumers` consumers.
func newPrioqRun(c radix.Client, consumers int) *prioqSystem {
	s := newPrioq(c, false, prioq.AtLeastOnce)
	s.run = consumers
	s.name = fmt.Sprintf("prioq levels reliable, Run %d×%d", consumers, 32/consumers)
	return s
}

func newPrioq(c radix.Client, rangeLayout bool, mode prioq.Mode) *prioqSystem {
	s := &prioqSystem{c: c, mode: mode}
	layout := "levels"
	if rangeLayout {
		layout = "range"
		s.layout = prioq.Range(-1<<40, 1<<40, 16)
		s.prio = func(l int) int64 { return int64(l-1) << 30 }
	} else {
		s.layout = prioq.Levels(levels)
		s.prio = func(l int) int64 { return int64(l) }
	}
	m := "reliable"
	if mode == prioq.AtMostOnce {
		m = "fast"
	}
	s.name = "prioq " + layout + " " + m
	return s
}

func (s *prioqSystem) Name() string     { return s.name }
func (s *prioqSystem) Reliable() bool   { return s.mode == prioq.AtLeastOnce }
func (s *prioqSystem) Priorities() bool { return true }
func (s *prioqSystem) Delays() bool     { return true }

func (s *prioqSystem) Prepare(ctx context.Context) error {
	s.qname = fmt.Sprintf("bench-%d", time.Now().UnixNano())
	cfg := prioq.Config{Layout: s.layout, Mode: s.mode, PromoteBatch: 512}
	if s.enqueueMW != nil {
		cfg.EnqueueMiddleware = []prioq.EnqueueMiddleware{s.enqueueMW(s.qname)}
	}
	q, err := prioq.Open(ctx, s.c, s.qname, cfg)
	s.q = q
	return err
}

func (s *prioqSystem) Enqueue(ctx context.Context, level int, p []byte) error {
	_, err := s.q.Enqueue(ctx, p, s.opts(level)...)
	return err
}

func (s *prioqSystem) EnqueueBatch(ctx context.Context, lv []int, ps [][]byte) error {
	items := make([]prioq.EnqueueItem, len(ps))
	for i := range ps {
		items[i] = prioq.EnqueueItem{Payload: ps[i], Options: s.opts(lv[i])}
	}
	_, err := s.q.EnqueueBatch(ctx, items)
	return err
}

func (s *prioqSystem) EnqueueAt(ctx context.Context, level int, p []byte, due time.Time) error {
	_, err := s.q.Enqueue(ctx, p, s.opts(level, prioq.At(due))...)
	return err
}

// Consume runs one Consumer per worker, each making single-message calls
// (AtLeastOnce: AckAndReceive, the ack of one message riding on the take of
// the next; AtMostOnce: Receive) or batched ones (ReceiveBatch + AckBatch):
// the same shape as the raw loops it is compared with. Only the first consumer promotes.
func (s *prioqSystem) Consume(ctx context.Context, workers, batch int, handle func([]byte)) error {
	if s.run > 0 {
		return s.consumeRun(ctx, workers, handle)
	}
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := 0; w < workers; w++ {
		cons, err := s.q.NewConsumer(prioq.ConsumerConfig{NoPromoter: w > 0})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A short Close: an AtMostOnce pop still waiting gives back what it
			// takes by itself, so the next phase need not wait BlockTimeout.
			defer func() {
				cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				_ = cons.Close(cctx)
				cancel()
			}()
			report := func(err error) { firstErr.CompareAndSwap(nil, err) }
			var err error
			if batch == 1 && s.mode == prioq.AtLeastOnce {
				err = singleCalls(ctx, cons, handle)
			} else {
				err = batchCalls(ctx, cons, batch, s.mode, handle, report)
			}
			if err != nil && ctx.Err() == nil {
				report(err)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return nil
}

// singleCalls is one consumer's loop of AtLeastOnce single calls: each
// message acked by the call that receives the next (AckAndReceive). It
// returns the error that ended it.
func singleCalls(ctx context.Context, cons *prioq.Consumer, handle func([]byte)) error {
	m, err := cons.Receive(ctx)
	for err == nil {
		handle(m.Payload)
		next, aerr := cons.AckAndReceive(ctx, m)
		if aerr != nil {
			_ = m.Ack(context.Background()) // nil at once if the call acked it
			return aerr
		}
		m = next
	}
	return err
}

// batchCalls is one consumer's loop of ReceiveBatch (and AckBatch for
// AtLeastOnce, whose failures go to report); it returns the error that
// ended it.
func batchCalls(ctx context.Context, cons *prioq.Consumer, batch int, mode prioq.Mode, handle func([]byte), report func(error)) error {
	for {
		msgs, err := cons.ReceiveBatch(ctx, batch)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			handle(m.Payload)
		}
		if mode == prioq.AtLeastOnce {
			for _, err := range prioq.AckBatch(context.Background(), msgs...) {
				if err != nil {
					report(err)
				}
			}
		}
	}
}

// consumeRun runs s.run consumers, each Run with Concurrency workers/s.run.
func (s *prioqSystem) consumeRun(ctx context.Context, workers int, handle func([]byte)) error {
	per := max(1, workers/s.run)
	errs := make(chan error, s.run)
	for i := 0; i < s.run; i++ {
		cfg := prioq.ConsumerConfig{Concurrency: per, NoPromoter: i > 0}
		if s.handlerMW != nil {
			cfg.Middleware = []prioq.Middleware{s.handlerMW}
		}
		cons, err := s.q.NewConsumer(cfg)
		if err != nil {
			return err
		}
		go func() {
			err := cons.Run(ctx, func(_ context.Context, m *prioq.Message) error {
				handle(m.Payload)
				return nil
			})
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = cons.Close(cctx)
			cancel()
			errs <- err
		}()
	}
	var first error
	for i := 0; i < s.run; i++ {
		if err := <-errs; err != nil && first == nil && ctx.Err() == nil {
			first = err
		}
	}
	return first
}

func (s *prioqSystem) Cleanup(ctx context.Context) {
	if s.q == nil {
		return
	}
	_, _ = s.q.Purge(ctx)
	_, _ = s.q.PurgeDead(ctx)
	var keys []string
	_ = s.c.Do(ctx, radix.Cmd(&keys, "KEYS", "prioq:{"+s.qname+"}:*"))
	if len(keys) > 0 {
		_ = s.c.Do(ctx, radix.Cmd(nil, "DEL", keys...))
	}
}

// ---- raw lists: the reference loop, and seed 001 ----------------------------

// rawLists is one list per level, RPUSH to produce and one multi-key BLPOP
// (highest level first) to consume: the "raw list loop" reference of
// DESIGN.md §8, which is also seed 001's final design. No ack, no ids.
type rawLists struct {
	c    radix.Client
	keys []string // highest level first
	name string
}

func newRawLists(c radix.Client) *rawLists { return &rawLists{c: c, name: rawLoop} }

func (s *rawLists) Name() string     { return s.name }
func (s *rawLists) Reliable() bool   { return false }
func (s *rawLists) Priorities() bool { return true }
func (s *rawLists) Delays() bool     { return false }
func (s *rawLists) Prepare(context.Context) error {
	p := fmt.Sprintf("bench:raw:%d:", time.Now().UnixNano())
	s.keys = nil
	for l := levels - 1; l >= 0; l-- {
		s.keys = append(s.keys, p+strconv.Itoa(l))
	}
	return nil
}
func (s *rawLists) key(level int) string { return s.keys[levels-1-level] }
func (s *rawLists) Enqueue(ctx context.Context, level int, p []byte) error {
	return s.c.Do(ctx, radix.Cmd(nil, "RPUSH", s.key(level), string(p)))
}
func (s *rawLists) EnqueueBatch(ctx context.Context, lv []int, ps [][]byte) error {
	pl := radix.NewPipeline()
	for i := range ps {
		pl.Append(radix.Cmd(nil, "RPUSH", s.key(lv[i]), string(ps[i])))
	}
	return s.c.Do(ctx, pl)
}
func (s *rawLists) EnqueueAt(context.Context, int, []byte, time.Time) error { return errUnsupported }
func (s *rawLists) Consume(ctx context.Context, workers, batch int, handle func([]byte)) error {
	return runWorkers(ctx, workers, func(ctx context.Context) error {
		var r []string
		err := s.c.Do(ctx, radix.Cmd(&r, "BLPOP", append(append([]string(nil), s.keys...), "1")...))
		if err != nil {
			return err
		}
		if len(r) == 2 {
			handle([]byte(r[1]))
		}
		return nil
	})
}
func (s *rawLists) Cleanup(ctx context.Context) { _ = s.c.Do(ctx, radix.Cmd(nil, "DEL", s.keys...)) }

// rawPipelined is the ceiling: producers pipeline RPUSH, consumers pipeline
// LPOP, no blocking, no priority, no ack. Nothing realistic goes faster.
type rawPipelined struct{ rawLists }

func newRawPipelined(c radix.Client) *rawPipelined {
	return &rawPipelined{rawLists{c: c, name: ceilLoop}}
}

func (s *rawPipelined) Priorities() bool { return false }
func (s *rawPipelined) Enqueue(ctx context.Context, _ int, p []byte) error {
	return s.rawLists.Enqueue(ctx, 0, p)
}
func (s *rawPipelined) EnqueueBatch(ctx context.Context, lv []int, ps [][]byte) error {
	return s.rawLists.EnqueueBatch(ctx, make([]int, len(ps)), ps)
}
func (s *rawPipelined) Consume(ctx context.Context, workers, batch int, handle func([]byte)) error {
	return runWorkers(ctx, workers, func(ctx context.Context) error {
		pl := radix.NewPipeline()
		got := make([]radix.Maybe, batch)
		bufs := make([][]byte, batch)
		for i := range got {
			got[i].Rcv = &bufs[i]
			pl.Append(radix.Cmd(&got[i], "LPOP", s.key(0)))
		}
		if err := s.c.Do(ctx, pl); err != nil {
			return err
		}
		n := 0
		for i := range got {
			if !got[i].Null {
				handle(bufs[i])
				n++
			}
		}
		if n == 0 {
			time.Sleep(time.Millisecond) // empty: it has no way to block
		}
		return nil
	})
}

// runWorkers runs step in a loop on `workers` goroutines until ctx is done.
func runWorkers(ctx context.Context, workers int, step func(context.Context) error) error {
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := step(ctx); err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
						time.Sleep(10 * time.Millisecond)
					}
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return nil
}
