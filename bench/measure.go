package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// counter records what consumers handled: how many, which sequence numbers
// more than once, and when the expected total arrived.
type counter struct {
	mu     sync.Mutex
	seen   map[uint64]int
	n      atomic.Int64
	target int64
	done   chan struct{}
	once   sync.Once
	dups   atomic.Int64
	onMsg  func(p []byte)
}

func newCounter(target int) *counter {
	return &counter{seen: make(map[uint64]int, target), target: int64(target), done: make(chan struct{})}
}

func (c *counter) handle(p []byte) {
	if c.onMsg != nil {
		c.onMsg(p)
	}
	c.mu.Lock()
	c.seen[payloadSeq(p)]++
	first := c.seen[payloadSeq(p)] == 1
	c.mu.Unlock()
	if !first {
		c.dups.Add(1)
		return
	}
	if c.n.Add(1) == c.target {
		c.once.Do(func() { close(c.done) })
	}
}

var seqGen atomic.Uint64

// produce enqueues n messages from `producers` goroutines, in batches of
// `batch` (1: single calls), with random levels.
func produce(ctx context.Context, s system, n, producers, batch int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				start := next.Add(int64(batch)) - int64(batch)
				if start >= int64(n) {
					return
				}
				k := min(batch, n-int(start))
				var err error
				if batch == 1 {
					l := rand.IntN(levels)
					err = s.Enqueue(ctx, l, makePayload(seqGen.Add(1), l))
				} else {
					lv := make([]int, k)
					ps := make([][]byte, k)
					for i := range ps {
						lv[i] = rand.IntN(levels)
						ps[i] = makePayload(seqGen.Add(1), lv[i])
					}
					err = s.EnqueueBatch(ctx, lv, ps)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return ctx.Err()
}

// consumeUntil runs consumers until the counter reaches its target or the
// deadline passes, and returns the elapsed time.
func consumeUntil(ctx context.Context, s system, workers, batch int, cnt *counter, limit time.Duration) (time.Duration, error) {
	cctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- s.Consume(cctx, workers, batch, cnt.handle) }()
	select {
	case <-cnt.done:
	case <-time.After(limit):
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	stop()
	return elapsed, <-errc
}

// endToEnd runs producers and consumers at once and measures from the first
// enqueue to the last message handled, with server INFO deltas around it.
func endToEnd(ctx context.Context, c radix.Client, s system, n, producers, prodBatch, workers, batch int, limit time.Duration) (throughput, error) {
	if err := s.Prepare(ctx); err != nil {
		return throughput{}, err
	}
	defer s.Cleanup(ctx)
	cnt := newCounter(n)
	cctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- s.Consume(cctx, workers, batch, cnt.handle) }()
	time.Sleep(100 * time.Millisecond) // consumers are waiting before work arrives
	m, err := startMeter(ctx, c)
	if err != nil {
		stop()
		return throughput{}, err
	}
	start := time.Now()
	pctx, pstop := context.WithTimeout(ctx, limit)
	perr := make(chan error, 1)
	go func() { perr <- produce(pctx, s, n, producers, prodBatch) }()
	timedOut := false
	select {
	case <-cnt.done:
	case <-pctx.Done():
		timedOut = true
	}
	elapsed := time.Since(start)
	cost, err := m.stop(ctx)
	pstop()
	stop()
	cerr := <-errc
	if e := <-perr; e != nil && !timedOut && e != context.Canceled {
		return throughput{}, e
	}
	if err != nil {
		return throughput{}, err
	}
	if cerr != nil {
		return throughput{}, cerr
	}
	handled := cnt.n.Load()
	t := throughput{Handled: handled, Target: n, Seconds: elapsed.Seconds(), Duplicates: cnt.dups.Load(), TimedOut: timedOut}
	cost.fill(&t)
	return t, nil
}

// drain enqueues n messages first (batches of 1,000, levels spread), then
// measures how fast workers consume them all, with server INFO deltas around
// the consuming only: the form in which River and Sidekiq publish numbers.
func drain(ctx context.Context, c radix.Client, s system, n, workers int, limit time.Duration) (throughput, error) {
	if err := s.Prepare(ctx); err != nil {
		return throughput{}, err
	}
	defer s.Cleanup(ctx)
	if err := produce(ctx, s, n, 4, 1000); err != nil {
		return throughput{}, err
	}
	cnt := newCounter(n)
	m, err := startMeter(ctx, c)
	if err != nil {
		return throughput{}, err
	}
	took, err := consumeUntil(ctx, s, workers, 1, cnt, limit)
	if err != nil {
		return throughput{}, err
	}
	cost, err := m.stop(ctx)
	if err != nil {
		return throughput{}, err
	}
	handled := cnt.n.Load()
	t := throughput{Handled: handled, Target: n, Seconds: took.Seconds(), Duplicates: cnt.dups.Load(), TimedOut: handled < int64(n)}
	cost.fill(&t)
	return t, nil
}

func summarize(ds []time.Duration, missing int) *latency {
	if len(ds) == 0 {
		return &latency{Missing: missing}
	}
	slices.Sort(ds)
	q := func(f float64) float64 {
		i := int(f * float64(len(ds)-1))
		return float64(ds[i]) / 1e6
	}
	return &latency{P50: q(0.5), P99: q(0.99), Max: float64(ds[len(ds)-1]) / 1e6, Samples: len(ds), Missing: missing}
}

// pickupLatency measures enqueue -> handler start with one idle consumer:
// each message is sent only after the previous one was handled and the
// consumer had time to go back to waiting.
func pickupLatency(ctx context.Context, s system, samples int, gap, limit time.Duration) (*latency, []time.Duration, error) {
	if err := s.Prepare(ctx); err != nil {
		return nil, nil, err
	}
	defer s.Cleanup(ctx)
	got := make(chan time.Duration, 1)
	cctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- s.Consume(cctx, 1, 1, func(p []byte) {
			select {
			case got <- time.Since(payloadTime(p)):
			default:
			}
		})
	}()
	time.Sleep(200 * time.Millisecond)
	var ds []time.Duration
	missing := 0
	end := time.Now().Add(limit)
	for i := 0; i < samples && ctx.Err() == nil && (i < 3 || time.Now().Before(end)); i++ {
		if err := s.Enqueue(ctx, 2, makePayload(seqGen.Add(1), 2)); err != nil {
			stop()
			<-errc
			return nil, nil, err
		}
		select {
		case d := <-got:
			ds = append(ds, d)
		case <-time.After(3 * time.Second):
			missing++
		}
		time.Sleep(gap)
	}
	stop()
	if err := <-errc; err != nil {
		return nil, nil, err
	}
	raw := append([]time.Duration(nil), ds...)
	return summarize(ds, missing), raw, nil
}

// lateness measures handler start - due time for delayed messages spread over
// `spread`. The payload's time field carries the due time.
func lateness(ctx context.Context, s system, n int, spread, limit time.Duration) (*latency, error) {
	if !s.Delays() {
		return nil, nil
	}
	if err := s.Prepare(ctx); err != nil {
		return nil, err
	}
	defer s.Cleanup(ctx)
	var mu sync.Mutex
	var ds []time.Duration
	var early int
	cnt := newCounter(n)
	cnt.onMsg = func(p []byte) {
		d := time.Since(payloadTime(p))
		mu.Lock()
		if d < 0 {
			early++
		}
		ds = append(ds, d)
		mu.Unlock()
	}
	cctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- s.Consume(cctx, 4, 1, cnt.handle) }()
	start := time.Now().Add(100 * time.Millisecond)
	for i := 0; i < n; i++ {
		due := start.Add(time.Duration(rand.Int64N(int64(spread))))
		p := makePayload(seqGen.Add(1), 1)
		putTime(p, due)
		if err := s.EnqueueAt(ctx, 1, p, due); err != nil {
			stop()
			<-errc
			return nil, err
		}
	}
	select {
	case <-cnt.done:
	case <-time.After(spread + limit + 100*time.Millisecond):
	}
	stop()
	if err := <-errc; err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	l := summarize(ds, n-len(ds))
	l.Early = early
	return l, nil
}

func putTime(p []byte, t time.Time) {
	v := uint64(t.UnixNano())
	for i := 7; i >= 0; i-- {
		p[i] = byte(v)
		v >>= 8
	}
}

// memoryPerMessage is the growth of used_memory per waiting message, minus
// the 64-byte payload.
func memoryPerMessage(ctx context.Context, c radix.Client, s system, n int) (float64, error) {
	if err := s.Prepare(ctx); err != nil {
		return 0, err
	}
	defer s.Cleanup(ctx)
	before, err := readStats(ctx, c)
	if err != nil {
		return 0, err
	}
	if err := produce(ctx, s, n, 4, 200); err != nil {
		return 0, err
	}
	after, err := readStats(ctx, c)
	if err != nil {
		return 0, err
	}
	return float64(after.memory-before.memory)/float64(n) - 64, nil
}

// idleRate is the server commands per second per idle consumer.
func idleRate(ctx context.Context, c radix.Client, s system, workers int, wait time.Duration, quick bool) (float64, error) {
	if err := s.Prepare(ctx); err != nil {
		return 0, err
	}
	defer s.Cleanup(ctx)
	cctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- s.Consume(cctx, workers, 1, func([]byte) {}) }()
	warm := 2 * time.Second // past start-up work
	if quick {
		warm = 300 * time.Millisecond
	}
	time.Sleep(warm)
	before, err := readStats(ctx, c)
	if err == nil {
		time.Sleep(wait)
		var after serverStats
		after, err = readStats(ctx, c)
		before.commands = after.commands - before.commands - 1
	}
	stop()
	if cerr := <-errc; cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return float64(before.commands) / wait.Seconds() / float64(workers), nil
}

// inversions pre-fills n messages of random levels, lets one consumer drain
// them, and counts the messages taken while a higher level was still waiting.
func inversions(ctx context.Context, s system, n int, limit time.Duration) (int, int, error) {
	if !s.Priorities() {
		return -1, 0, nil
	}
	if err := s.Prepare(ctx); err != nil {
		return 0, 0, err
	}
	defer s.Cleanup(ctx)
	if err := produce(ctx, s, n, 1, 100); err != nil {
		return 0, 0, err
	}
	var mu sync.Mutex
	var order []int
	cnt := newCounter(n)
	cnt.onMsg = func(p []byte) { mu.Lock(); order = append(order, payloadLevel(p)); mu.Unlock() }
	if _, err := consumeUntil(ctx, s, 1, 1, cnt, limit); err != nil {
		return 0, 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	inv := 0
	best := -1
	for i := len(order) - 1; i >= 0; i-- {
		if best > order[i] {
			inv++
		}
		best = max(best, order[i])
	}
	return inv, len(order), nil
}
