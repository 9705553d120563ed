// Command bench measures prioq against the five seed approaches, a peer
// (hibiken/asynq, run as a program of its own, bench/asynqpeer) and the raw
// Redis ceilings, side by side on one Redis in one run, and reports ratios.
//
//	go run ./bench          # about a minute, with asynq, ends with the comparison
//	go run ./bench -full    # every point and size, about 15 minutes
//	go run ./bench -quick   # a smoke run, about 40 s, no asynq
//
// It finds Redis like the tests do: PRIOQ_REDIS_ADDR, else redis-server on
// PATH on a free port (`make bench` installs it). Results go to stdout (Markdown) and to
// -out (results.json, results.md, PNG plots).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/bench/internal/wire"
	"github.com/prioq/prioq/internal/redisfind"
)

type machine struct {
	Redis     string `json:"redis"`
	RedisFrom string `json:"redis_from"`
	Cores     int    `json:"cores"`
	Go        string `json:"go"`
	OS        string `json:"os"`
	Date      string `json:"date"`
}

// The JSON shared with the asynq peer (bench/internal/wire).
type (
	params     = wire.Params
	sysResult  = wire.System
	throughput = wire.Throughput
	latency    = wire.Latency
)

type report struct {
	Machine machine      `json:"machine"`
	Params  params       `json:"params"`
	Systems []*sysResult `json:"systems"`
	Scale   *scaleResult `json:"scale,omitempty"`
	Budgets []budget     `json:"budgets"`
}

func main() {
	quick := flag.Bool("quick", false, "smoke run: about 40 s, smallest sizes, no asynq")
	full := flag.Bool("full", false, "full run: every point and size, about 15 minutes")
	seeds := flag.Bool("seeds", false, "also measure the five seed designs (always in -quick and -full)")
	out := flag.String("out", "", "results folder (default results/<time>)")
	noAsynq := flag.Bool("no-asynq", false, "skip the asynq peer")
	only := flag.String("only", "", "run only systems whose name contains this")
	e2eOnly := flag.Bool("e2e", false, "only the end-to-end single-call runs (to iterate on throughput)")
	lanesOnly := flag.Int("lanes", 0, "only the take cost of 2 vs 64 lanes, in this many alternating rounds")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	reportFrom := flag.String("report", "", "recompute tables, budgets and plots from a saved results.json into -out")
	cluster := flag.Bool("cluster", false, "only sharded queues on Redis Clusters of 1, 3 and 6 primaries (own redis-server processes), beside the unsharded queue and the raw list loop on as many hash tags")
	queues := flag.Bool("queues", false, "only many queues: one MultiConsumer over 10,000 and over 100 queues (pool of 64) beside a single queue's Consumer")
	flag.Parse()
	if *reportFrom != "" {
		rereport(*reportFrom, *out)
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	// The default run is about a minute: every system and asynq at sizes
	// that keep the ratios steady, with few scale points. -full measures
	// every point at the sizes the README's numbers come from.
	p := params{Profile: "standard", Quick: true, Messages: 10000, Producers: 8, Workers: 32, BatchWorkers: 8, Batch: 64, PhaseLimit: 5,
		PickupSamples: 100, DelayedSamples: 100, MemoryMessages: 10000, IdleSeconds: 2, InvMessages: 400,
		DrainMessages: 50000}
	switch {
	case *quick && *full:
		fatal(fmt.Errorf("-quick and -full exclude each other"))
	case *full:
		*seeds = true
		p = params{Profile: "full", Messages: 40000, Producers: 8, Workers: 32, BatchWorkers: 8, Batch: 64, PhaseLimit: 15,
			PickupSamples: 500, DelayedSamples: 500, MemoryMessages: 50000, IdleSeconds: 12, InvMessages: 2000,
			DrainMessages: 1000000}
	case *quick:
		*seeds = true
		p = params{Profile: "quick", Quick: true, Messages: 4000, Producers: 8, Workers: 32, BatchWorkers: 8, Batch: 64, PhaseLimit: 0.6,
			PickupSamples: 60, DelayedSamples: 60, MemoryMessages: 5000, IdleSeconds: 0.5, InvMessages: 300}
		*noAsynq = true
	}
	ctx := context.Background()
	if *cluster {
		runClusterBench(ctx, p, *out)
		return
	}
	if *queues {
		runQueuesBench(ctx, p, *out)
		return
	}
	srv, err := redisfind.Find(ctx)
	if err != nil {
		fatal(err)
	}
	defer srv.Stop()
	version, _ := redisfind.Version(srv.Addr)
	m := machine{Redis: version, RedisFrom: srv.How, Cores: runtime.NumCPU(), Go: runtime.Version(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, Date: time.Now().UTC().Format(time.RFC3339)}
	fmt.Fprintf(os.Stderr, "bench: Redis %s from %s; %d cores; %s\n", m.Redis, m.RedisFrom, m.Cores, m.Go)

	// One pool for every system: room for 64 blocking consumers and more.
	// radix pings Size/5 connections per second by default; that is the
	// pool's cost, not a queue's, so it is off here (see the README).
	client, err := radix.PoolConfig{Size: 160, PingInterval: -1}.New(ctx, "tcp", srv.Addr)
	if err != nil {
		fatal(err)
	}
	defer client.Close()

	if *lanesOnly > 0 {
		lc, err := compareLanes(ctx, client, *lanesOnly, 2000)
		if err != nil {
			fatal(err)
		}
		for _, c := range lc.cases() {
			fmt.Printf("take cost, 2 → 64 lanes, %s: %s\n", c.what, c)
		}
		return
	}

	systems := []system{
		newPrioq(client, false, prioq.AtLeastOnce),
		newPrioq(client, false, prioq.AtMostOnce),
		newPrioq(client, true, prioq.AtLeastOnce),
		newPrioq(client, true, prioq.AtMostOnce),
		newPrioqRun(client, 1),
		newPrioqRun(client, 4),
		newPrioqRunWith(client, "pass-through middleware", passEnqueue, passHandler),
		newPrioqRunWith(client, "prioqotel", otelEnqueue, otelHandler),
		newRawLists(client),
		newRawPipelined(client),
		&seed002{seedBase{c: client}},
		&seed000{seedBase{c: client}},
		&seed003{seedBase{c: client}},
		&seed004{seedBase{c: client}},
	}
	rep := report{Machine: m, Params: p}
	var run []system
	for _, s := range systems {
		if _, seed := s.(seedSystem); seed && !*seeds && *only == "" {
			continue // the default run compares prioq, the raw loop and asynq
		}
		if *only == "" || strings.Contains(s.Name(), *only) {
			run = append(run, s)
		}
	}
	withAsynq := !*noAsynq && *only == "" && !*e2eOnly
	steps := len(run)
	if withAsynq {
		steps++
	}
	if *only == "" && !*e2eOnly {
		steps++ // the scale curves
	}
	begun := time.Now()
	step := 0
	progress := func(what string) {
		step++
		fmt.Fprintf(os.Stderr, "bench [%d/%d, %v]: %s\n", step, steps, time.Since(begun).Round(time.Second), what)
	}
	for _, s := range run {
		progress(s.Name())
		if *e2eOnly {
			t, err := endToEnd(ctx, client, s, p.Messages, p.Producers, 1, p.Workers, 1, time.Minute)
			if err != nil {
				fatal(err)
			}
			fmt.Printf("%-40s %8.0f msg/s  %.1f cmds/msg  %.1f us CPU/msg\n", s.Name(), t.Rate, t.CmdsPerMsg, t.CPUPerMsg)
			continue
		}
		start := time.Now()
		rep.Systems = append(rep.Systems, runSystem(ctx, client, s, p))
		fmt.Fprintf(os.Stderr, "bench: %s took %v\n", s.Name(), time.Since(start).Round(100*time.Millisecond))
	}
	if *e2eOnly {
		return
	}
	if withAsynq {
		progress("asynq (building and running bench/asynqpeer)")
		rep.Systems = append(rep.Systems, runAsynq(ctx, srv.Addr, p))
	}
	if *only == "" {
		progress("scale curves")
		start := time.Now()
		rep.Scale = runScale(ctx, client, p)
		fmt.Fprintf(os.Stderr, "bench: scale curves took %v\n", time.Since(start).Round(100*time.Millisecond))
	}
	writeResults(&rep, *out)
}

// writeResults computes the budgets and writes the Markdown (also to
// stdout), the JSON and the plots to dir (default results/<time>).
func writeResults(rep *report, dir string) {
	rep.Budgets = budgets(rep)
	if dir == "" {
		dir = filepath.Join("results", time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fatal(err)
	}
	md := markdown(rep)
	fmt.Print(md)
	_ = os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644)
	js, _ := json.MarshalIndent(rep, "", "  ")
	_ = os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644)
	if err := plots(rep, dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench: plots:", err)
	}
	fmt.Fprintf(os.Stderr, "bench: results in %s\n", dir)
}

// rereport reads a saved results.json and writes everything again, for a
// changed report or verdict without measuring again.
func rereport(path, dir string) {
	b, err := os.ReadFile(path)
	if err != nil {
		fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		fatal(err)
	}
	writeResults(&rep, dir)
}

func runSystem(ctx context.Context, c radix.Client, s system, p params) *sysResult {
	r := &sysResult{Name: s.Name(), Reliable: s.Reliable(), Priorities: s.Priorities()}
	note := func(what string, err error) {
		if err != nil {
			r.Errors = append(r.Errors, what+": "+err.Error())
		}
	}
	limit := time.Duration(p.PhaseLimit * float64(time.Second))
	// Drain a pre-filled queue: the reliable single-call and Run shapes and
	// the raw loop they are compared with, all with the same 32 workers.
	drained := func() {
		if p.DrainMessages == 0 {
			return
		}
		ps, isPrioq := s.(*prioqSystem)
		if isPrioq && ps.enqueueMW != nil {
			return // the instrumented variants are compared end to end only
		}
		if !(isPrioq && ps.mode == prioq.AtLeastOnce && ps.layout.String() == prioq.Levels(levels).String()) && s.Name() != "raw list loop (seed 001)" {
			return
		}
		t, err := drain(ctx, c, s, p.DrainMessages, p.Workers, 20*limit)
		note("drain", err)
		if err == nil {
			r.Drain = &t
		}
	}
	if ps, ok := s.(*prioqSystem); ok && ps.run > 0 {
		// Run systems: only the shapes users run Run in.
		single, err := endToEnd(ctx, c, s, p.Messages, p.Producers, 1, p.Workers, 1, limit)
		note("end to end", err)
		if err == nil {
			r.E2E = &single
		}
		drained()
		return r
	}

	// Enqueue only, then take only (the queue is full from the first phase).
	if err := s.Prepare(ctx); err == nil {
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, limit)
		err := produce(pctx, s, p.Messages, p.Producers, 1)
		cancel()
		el := time.Since(start)
		if err == nil || err == context.DeadlineExceeded {
			r.Enqueue = &throughput{Target: p.Messages, Seconds: el.Seconds(), TimedOut: err != nil}
			r.Enqueue.Rate = float64(p.Messages) / el.Seconds()
			if err != nil {
				r.Enqueue.Rate = 0
			}
			cnt := newCounter(p.Messages)
			took, cerr := consumeUntil(ctx, s, p.Workers, 1, cnt, limit)
			note("take", cerr)
			r.Take = &throughput{Handled: cnt.n.Load(), Target: p.Messages, Seconds: took.Seconds(),
				Rate: float64(cnt.n.Load()) / took.Seconds(), Duplicates: cnt.dups.Load(), TimedOut: cnt.n.Load() < int64(p.Messages)}
		} else {
			note("enqueue", err)
		}
		s.Cleanup(ctx)
	}
	single, err := endToEnd(ctx, c, s, p.Messages, p.Producers, 1, p.Workers, 1, limit)
	note("end to end", err)
	if err == nil {
		r.E2E = &single
	}
	batched, err := endToEnd(ctx, c, s, p.Messages, p.Producers, 100, p.BatchWorkers, p.Batch, limit)
	note("end to end batched", err)
	if err == nil {
		r.E2EBatch = &batched
	}
	lat, raw, err := pickupLatency(ctx, s, p.PickupSamples, 3*time.Millisecond, limit)
	note("pickup", err)
	r.Pickup = lat
	for _, d := range raw {
		r.PickupRaw = append(r.PickupRaw, float64(d)/1e6)
	}
	if s.Delays() {
		spread := 2 * time.Second
		if p.Quick {
			spread = 400 * time.Millisecond
		}
		late, err := lateness(ctx, s, p.DelayedSamples, spread, limit)
		note("lateness", err)
		r.Late = late
	}
	mem, err := memoryPerMessage(ctx, c, s, p.MemoryMessages)
	note("memory", err)
	if err == nil {
		r.MemPerMsg = &mem
	}
	idle, err := idleRate(ctx, c, s, 4, time.Duration(p.IdleSeconds*float64(time.Second)), p.Quick)
	note("idle", err)
	if err == nil {
		r.IdleRate = &idle
	}
	inv, of, err := inversions(ctx, s, p.InvMessages, limit)
	note("inversions", err)
	if err == nil && inv >= 0 {
		r.Inversions, r.InvOf = &inv, of
	}
	drained()
	return r
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
