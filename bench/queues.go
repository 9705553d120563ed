package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/fanout"
	"github.com/prioq/prioq/internal/redisfind"
)

// -queues: one consumer process over many queues (a MultiConsumer), beside a
// single queue with its Consumer, in interleaved rounds on one Redis. A
// producer sends 2,000 messages a second spread at random over the queues;
// each row says what the consumer holds (connections, goroutines), what it
// costs Redis when every queue is empty (commands a second) and per message
// (CPU), and how soon a message is picked up.

// queuesRow is one setup's figures in one round.
type queuesRow struct {
	Name        string
	Queues      int
	Pool        int
	Conns       int     // connections the consumer holds out of the pool (subscribed or blocking)
	Goroutines  int     // started by the consumer (Run's workers included)
	IdleCmds    float64 // round trips the consumer sends a second, every queue empty
	IdleCalls   float64 // Redis commands run a second then (inside scripts too)
	IdleCPU     float64 // Redis CPU then, % of a core
	CPUPerMsg   float64 // Redis CPU µs per message: enqueue, take, ack
	P50, P99    float64 // pickup, ms: enqueue to handler
	Sent, Late  int     // late: picked up after more than a second
	Failed      int     // enqueues that failed
	Refused     int     // the 100 Consumers of the old way refused for the pool's sake
	Accepted    int
	Description string
}

const (
	queuesRate    = 2000 // messages a second, over all queues
	lateAfter     = time.Second
	queuesWorkers = 32
)

func runQueuesBench(ctx context.Context, p params, dir string) {
	srv, err := redisfind.Find(ctx)
	if err != nil {
		fatal(err)
	}
	defer srv.Stop()
	seconds, rounds := 5.0, 3
	if p.Profile == "full" {
		seconds, rounds = 10, 5
	}
	big, err := radix.PoolConfig{Size: 16, PingInterval: -1}.New(ctx, "tcp", srv.Addr)
	if err != nil {
		fatal(err)
	}
	defer big.Close()
	fmt.Fprintf(os.Stderr, "bench: creating 10,000 queues\n")
	many := createBenchQueues(ctx, big, "mq", 10000)
	hundred := createBenchQueues(ctx, big, "hq", 100)
	single := createBenchQueues(ctx, big, "sq", 1)

	byName := map[string][]queuesRow{}
	var names []string
	for r := 1; r <= rounds; r++ {
		for _, s := range []struct {
			name   string
			queues []string
			pool   int
			multi  bool
		}{
			{"single queue, one Consumer", single, 16, false},
			{"multi-queue Q=10000", many, 16, true},
			{"multi-queue Q=100, pool of 64", hundred, 64, true},
		} {
			fmt.Fprintf(os.Stderr, "bench: round %d/%d: %s\n", r, rounds, s.name)
			row, err := queuesSetup(ctx, srv.Addr, s.name, s.queues, s.pool, s.multi, seconds)
			if err != nil {
				fatal(fmt.Errorf("%s: %w", s.name, err))
			}
			if r == 1 {
				names = append(names, s.name)
			}
			byName[s.name] = append(byName[s.name], row)
			fmt.Printf("%s: conns %d, goroutines %d, idle %.1f calls/s (%.0f commands/s, %.1f%% CPU), %.1f µs CPU/msg, pickup p50 %.2f ms p99 %.2f ms, %d sent, %d failed, %d late\n",
				row.Name, row.Conns, row.Goroutines, row.IdleCmds, row.IdleCalls, row.IdleCPU, row.CPUPerMsg, row.P50, row.P99, row.Sent, row.Failed, row.Late)
		}
	}
	old, err := consumerPerQueue(ctx, srv.Addr, hundred)
	if err != nil {
		fatal(err)
	}
	md := queuesMarkdown(names, byName, old, seconds)
	fmt.Print(md)
	if dir == "" {
		dir = filepath.Join("results", time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(dir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "queues.md"), []byte(md), 0o644)
		fmt.Fprintf(os.Stderr, "bench: results in %s\n", dir)
	}
}

// createBenchQueues creates n AtLeastOnce queues of 3 levels, 32 at a time,
// and empties them (an earlier run may have left some).
func createBenchQueues(ctx context.Context, c radix.Client, base string, n int) []string {
	names := make([]string, n)
	errs := make([]error, n)
	fanout.Each(n, 32, func(i int) {
		names[i] = fmt.Sprintf("bench-%s-%05d", base, i)
		q, err := prioq.Open(ctx, c, names[i], prioq.Config{Layout: prioq.Levels(3), AllowEviction: true})
		if err == nil {
			_, err = q.Purge(ctx)
		}
		errs[i] = err
	})
	if err := errors.Join(errs...); err != nil {
		fatal(err)
	}
	return names
}

// serverCPU is the Redis process's CPU time so far, µs, and the commands it
// ran (inside scripts too), from readStats.
func serverCPU(ctx context.Context, c radix.Client) (cpu float64, calls int64) {
	st, _ := readStats(ctx, c)
	return st.cpu * 1e6, st.commands
}

// heldConns counts the server's clients that are blocked or subscribed.
func heldConns(ctx context.Context, c radix.Client) int {
	var list string
	_ = c.Do(ctx, radix.Cmd(&list, "CLIENT", "LIST"))
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, "cmd=blpop") || strings.Contains(line, "cmd=bzpopmin") || strings.Contains(line, "cmd=blmpop") ||
			(strings.Contains(line, " ssub=") && !strings.Contains(line, " ssub=0")) {
			n++
		}
	}
	return n
}

// queuesSetup runs one setup: the consumer (a MultiConsumer over queues, or
// a Consumer of the one queue) with Run, idle for two seconds, then the
// producer at queuesRate for the given seconds.
func queuesSetup(ctx context.Context, addr, name string, queues []string, pool int, multi bool, seconds float64) (queuesRow, error) {
	row := queuesRow{Name: name, Queues: len(queues), Pool: pool}
	inner, err := radix.PoolConfig{Size: pool, PingInterval: -1}.New(ctx, "tcp", addr)
	if err != nil {
		return row, err
	}
	defer inner.Close()
	client := &countingClient{Client: inner}
	admin, err := radix.Dial(ctx, "tcp", addr)
	if err != nil {
		return row, err
	}
	defer admin.Close()
	qs := make([]*prioq.Queue, len(queues))
	for i, n := range queues {
		if qs[i], err = prioq.OpenExisting(ctx, client, n, prioq.Config{AllowEviction: true}); err != nil {
			return row, err
		}
	}
	before := runtime.NumGoroutine()
	var cons interface {
		Run(context.Context, prioq.Handler) error
		Close(context.Context) error
	}
	if multi {
		mc, err := prioq.NewMultiConsumer(ctx, client, prioq.MultiConfig{Queues: queues,
			Consumer: prioq.ConsumerConfig{Concurrency: queuesWorkers}})
		if err != nil {
			return row, err
		}
		cons = mc
	} else {
		c, err := qs[0].NewConsumer(prioq.ConsumerConfig{Concurrency: queuesWorkers})
		if err != nil {
			return row, err
		}
		cons = c
	}
	var lat []float64
	var latMu sync.Mutex
	var got atomic.Int64
	rctx, stop := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = cons.Run(rctx, func(_ context.Context, m *prioq.Message) error {
			sent := time.Unix(0, int64(binary.BigEndian.Uint64(m.Payload)))
			latMu.Lock()
			lat = append(lat, float64(time.Since(sent).Microseconds())/1000)
			latMu.Unlock()
			got.Add(1)
			return nil
		})
	}()
	defer func() {
		stop()
		<-runDone
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = cons.Close(c)
		cancel()
	}()

	// Idle: every queue empty.
	time.Sleep(time.Second)
	row.Goroutines = runtime.NumGoroutine() - before
	row.Conns = heldConns(ctx, admin)
	cpuA, c0 := serverCPU(ctx, admin)
	n0 := client.n.Load()
	const idle = 4 // seconds: two probes at the default ProbeInterval
	time.Sleep(idle * time.Second)
	cpuB, c1 := serverCPU(ctx, admin)
	row.IdleCmds = float64(client.n.Load()-n0) / idle
	row.IdleCalls = float64(c1-c0-1) / idle // less the INFO itself
	row.IdleCPU = (cpuB - cpuA) / idle / 1e4

	// Under load: 2,000 messages a second at random over the queues.
	cpu0, _ := serverCPU(ctx, admin)
	total := int(queuesRate * seconds)
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	const producers = 8
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < total; i += producers {
				time.Sleep(time.Until(start.Add(time.Duration(float64(i) / queuesRate * float64(time.Second)))))
				payload := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))
				ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := qs[rand.IntN(len(qs))].Enqueue(ectx, payload, prioq.Priority(int64(rand.IntN(3))))
				cancel()
				if err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for got.Load()+failed.Load() < int64(total) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cpu1, _ := serverCPU(ctx, admin)
	row.Sent, row.Failed = total, int(failed.Load())
	latMu.Lock()
	defer latMu.Unlock()
	row.CPUPerMsg = (cpu1 - cpu0) / float64(max(len(lat), 1))
	for _, l := range lat {
		if l > float64(lateAfter.Milliseconds()) {
			row.Late++
		}
	}
	row.Late += total - row.Failed - len(lat) // never delivered
	slices.Sort(lat)
	if len(lat) > 0 {
		row.P50, row.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return row, nil
}

// consumerPerQueue is the old way for 100 queues on a pool of 64: one
// Consumer each. It counts those refused (each would hold 2 blocking
// connections) and checks enqueues still go through beside the others.
func consumerPerQueue(ctx context.Context, addr string, queues []string) (queuesRow, error) {
	row := queuesRow{Name: "Consumer per queue, Q=100, pool of 64", Queues: len(queues), Pool: 64}
	client, err := radix.PoolConfig{Size: 64, PingInterval: -1}.New(ctx, "tcp", addr)
	if err != nil {
		return row, err
	}
	defer client.Close()
	var cs []*prioq.Consumer
	var qs []*prioq.Queue
	for _, n := range queues {
		q, err := prioq.OpenExisting(ctx, client, n, prioq.Config{AllowEviction: true})
		if err != nil {
			return row, err
		}
		qs = append(qs, q)
		c, err := q.NewConsumer(prioq.ConsumerConfig{})
		if err != nil {
			row.Refused++
			continue
		}
		cs = append(cs, c)
		go func() {
			for {
				m, err := c.Receive(ctx)
				if err != nil {
					return
				}
				_ = m.Ack(ctx)
			}
		}()
	}
	row.Accepted = len(cs)
	time.Sleep(500 * time.Millisecond)
	for i := range 200 {
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := qs[i%len(qs)].Enqueue(ectx, []byte("x"))
		cancel()
		row.Sent++
		if err != nil {
			row.Failed++
		}
	}
	for _, c := range cs {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = c.Close(cctx)
		cancel()
	}
	for _, q := range qs {
		_, _ = q.Purge(ctx)
	}
	return row, nil
}

func queuesMarkdown(names []string, byName map[string][]queuesRow, old queuesRow, seconds float64) string {
	var b strings.Builder
	med := func(rows []queuesRow, f func(queuesRow) float64) string {
		v := make([]float64, len(rows))
		for i, r := range rows {
			v[i] = f(r)
		}
		slices.Sort(v)
		return fmt.Sprintf("%.2f (%.2f–%.2f)", v[len(v)/2], v[0], v[len(v)-1])
	}
	fmt.Fprintf(&b, "\n## Many queues, one consumer process (%d interleaved rounds; median (range))\n\n", len(byName[names[0]]))
	fmt.Fprintf(&b, "%d msg/s for %.0f s at random over the queues, Run with %d workers, one Redis (%d cores shared with the client).\n\n",
		queuesRate, seconds, queuesWorkers, runtime.NumCPU())
	b.WriteString("| setup | held connections | goroutines | idle: calls sent/s | idle: commands run/s | idle: Redis CPU % | Redis CPU µs/msg | × single queue | pickup p50 ms | pickup p99 ms | sent | failed | late (>1 s) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	ref := byName[names[0]]
	for _, n := range names {
		rows := byName[n]
		ratio := make([]queuesRow, len(rows))
		for i := range rows {
			ratio[i] = rows[i]
			ratio[i].CPUPerMsg = rows[i].CPUPerMsg / max(ref[i].CPUPerMsg, 1e-9) // same round
		}
		sent, failed, late := 0, 0, 0
		for _, r := range rows {
			sent, failed, late = sent+r.Sent, failed+r.Failed, late+r.Late
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %d |\n", n,
			med(rows, func(r queuesRow) float64 { return float64(r.Conns) }),
			med(rows, func(r queuesRow) float64 { return float64(r.Goroutines) }),
			med(rows, func(r queuesRow) float64 { return r.IdleCmds }),
			med(rows, func(r queuesRow) float64 { return r.IdleCalls }),
			med(rows, func(r queuesRow) float64 { return r.IdleCPU }),
			med(rows, func(r queuesRow) float64 { return r.CPUPerMsg }),
			med(ratio, func(r queuesRow) float64 { return r.CPUPerMsg }),
			med(rows, func(r queuesRow) float64 { return r.P50 }),
			med(rows, func(r queuesRow) float64 { return r.P99 }), sent, failed, late)
	}
	fmt.Fprintf(&b, "\nThe old way, %s: %d consumers accepted, %d refused with ErrPoolTooSmall; %d enqueues beside the accepted ones, %d failed.\n",
		old.Name, old.Accepted, old.Refused, old.Sent, old.Failed)
	return b.String()
}

// countingClient counts the calls (round trips: a pipeline is one) made on
// a client.
type countingClient struct {
	radix.Client
	n atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, a radix.Action) error {
	c.n.Add(1)
	return c.Client.Do(ctx, a)
}
