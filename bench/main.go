// Command bench measures prioq against the five seed approaches, a peer
// (hibiken/asynq, run as a program of its own, bench/asynqpeer) and the raw
// Redis ceilings, side by side on one Redis in one run, and reports ratios.
// The systems run in interleaved rounds (every system once per round, A B C
// … A B C …) and each figure is reported as its median over the rounds with
// its range (rounds.go): one figure swings ±30% between runs on a small
// machine. asynq and the scale curves run once.
//
//	go run ./bench          # 3 rounds, about a minute, with asynq, ends with the comparison
//	go run ./bench -full    # 5 rounds of every point and size, about 20 minutes
//	go run ./bench -quick   # a smoke run, one round, about 40 s, no asynq
//	go run ./bench -rounds N  # N rounds with any of them
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
	Machine machine `json:"machine"`
	Params  params  `json:"params"`
	// Systems is one result per system: each figure is its median over
	// Rounds (mergeRounds), or the one measurement.
	Systems []*sysResult `json:"systems"`
	// Ranges is each system's headline figures over the rounds, by system
	// name and figure: median, min and max. Computed from Rounds like the
	// budgets; absent with one round.
	Ranges map[string]map[string]figRange `json:"ranges,omitempty"`
	// Rounds is every round's results in the order they ran; absent with
	// one round (and in results saved before rounds). asynq runs once and
	// is in Systems only.
	Rounds  [][]*sysResult `json:"rounds,omitempty"`
	Scale   *scaleResult   `json:"scale,omitempty"`
	Budgets []budget       `json:"budgets"`
}

func main() {
	quick := flag.Bool("quick", false, "smoke run: about 40 s, smallest sizes, no asynq")
	full := flag.Bool("full", false, "full run: 5 rounds of every point and size, about 20 minutes")
	seeds := flag.Bool("seeds", false, "also measure the five seed designs (always in -quick and -full)")
	out := flag.String("out", "", "results folder (default results/<time>)")
	noAsynq := flag.Bool("no-asynq", false, "skip the asynq peer")
	only := flag.String("only", "", "run only systems whose name contains this (ending in $: whose name is this)")
	e2eOnly := flag.Bool("e2e", false, "only the end-to-end single-call runs (to iterate on throughput)")
	drainOnly := flag.Bool("drain", false, "only the drains of a pre-filled queue (reliable levels single calls, Run, the raw loop), in interleaved rounds")
	lanesOnly := flag.Int("lanes", 0, "only the take cost of 2 vs 64 lanes, in this many alternating rounds")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	reportFrom := flag.String("report", "", "recompute tables, budgets and plots from a saved results.json into -out")
	cluster := flag.Bool("cluster", false, "only sharded queues on Redis Clusters of 1, 3 and 6 primaries (own redis-server processes), beside the unsharded queue and the raw list loop on as many hash tags")
	scaleOnly := flag.Bool("scale", false, "only the scale curves (depth, lanes, segments, consumers)")
	queues := flag.Bool("queues", false, "only many queues: one MultiConsumer over 10,000 and over 100 queues (pool of 64) beside a single queue's Consumer")
	rounds := flag.Int("rounds", 0, "interleaved rounds of the systems, also with -e2e (default 3, -full 5, -quick 1; -cluster and -queues keep their own)")
	server := flag.String("server", "", "the server binary to start (redis-server, the default, or valkey-server; PRIOQ_SERVER says the same); ignored with PRIOQ_REDIS_ADDR")
	flag.Parse()
	if *server != "" {
		os.Setenv(redisfind.ServerEnv, *server)
	}
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

	// The default run is about a minute: three rounds of every system, then
	// asynq once, at sizes that fit three rounds in the minute, with few
	// scale points. -full measures every point at the sizes the README's
	// numbers come from, in five rounds.
	p := params{Profile: "standard", Quick: true, Rounds: 3, Messages: 5000, Producers: 8, Workers: 32, BatchWorkers: 8, Batch: 64, PhaseLimit: 3,
		PickupSamples: 40, DelayedSamples: 50, MemoryMessages: 5000, IdleSeconds: 0.5, InvMessages: 300,
		DrainMessages: 20000}
	switch {
	case *quick && *full:
		fatal(fmt.Errorf("-quick and -full exclude each other"))
	case *full:
		*seeds = true
		// Five rounds: per round, half the sizes one full run used to
		// measure once (40,000 messages, 1,000,000 drained).
		p = params{Profile: "full", Rounds: 5, Messages: 20000, Producers: 8, Workers: 32, BatchWorkers: 8, Batch: 64, PhaseLimit: 8,
			PickupSamples: 200, DelayedSamples: 200, MemoryMessages: 20000, IdleSeconds: 4, InvMessages: 1000,
			DrainMessages: 300000}
	case *quick:
		*seeds = true
		p = params{Profile: "quick", Quick: true, Rounds: 1, Messages: 4000, Producers: 8, Workers: 32, BatchWorkers: 8, Batch: 64, PhaseLimit: 0.6,
			PickupSamples: 60, DelayedSamples: 60, MemoryMessages: 5000, IdleSeconds: 0.5, InvMessages: 300}
		*noAsynq = true
	}
	if *rounds > 0 {
		p.Rounds = *rounds
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
	fmt.Fprintf(os.Stderr, "bench: server %s from %s; %d cores; %s\n", m.Redis, m.RedisFrom, m.Cores, m.Go)

	// One pool for every system: room for 64 blocking consumers and more.
	// radix pings Size/5 connections per second by default; that is the
	// pool's cost, not a queue's, so it is off here (see the README). A phase
	// ends by cancelling its consumers' blocking calls, and radix closes each
	// connection such a call held and dials a replacement every
	// MinReconnectInterval (125 ms by default): 32 of them took 4 s, the next
	// phase found the pool short, and prioq's pool check refused its
	// consumers (ErrPoolTooSmall). Dialling back at once keeps one phase from
	// slowing the next.
	pool, err := radix.PoolConfig{Size: 160, PingInterval: -1, MinReconnectInterval: time.Millisecond}.New(ctx, "tcp", srv.Addr)
	if err != nil {
		fatal(err)
	}
	defer pool.Close()
	// Counted: the round trips per message of the end-to-end runs.
	client := &countingClient{Client: pool}

	if *scaleOnly {
		rep := report{Machine: m, Params: p}
		rep.Scale = runScale(ctx, client, p)
		writeResults(&rep, *out)
		return
	}
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
		newPrioqGroups(client, 1000),
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
		if *only == "" || s.Name()+"$" == *only || !strings.HasSuffix(*only, "$") && strings.Contains(s.Name(), *only) {
			run = append(run, s)
		}
	}
	if *e2eOnly {
		runEndToEnd(ctx, client, run, p)
		return
	}
	if *drainOnly {
		runDrains(ctx, client, run, p)
		return
	}
	withAsynq := !*noAsynq && *only == ""
	steps := len(run) * p.Rounds
	if withAsynq {
		steps++
	}
	if *only == "" {
		steps++ // the scale curves
	}
	begun := time.Now()
	step := 0
	progress := func(what string) {
		step++
		fmt.Fprintf(os.Stderr, "bench [%d/%d, %v]: %s\n", step, steps, time.Since(begun).Round(time.Second), what)
	}
	// Every round runs every system once, in the same order, so that a slow
	// spell of the machine falls on the neighbours of one round (and the
	// ratios of that round) rather than on every measurement of one system.
	for round := 1; round <= p.Rounds; round++ {
		var results []*sysResult
		for _, s := range run {
			progress(fmt.Sprintf("round %d/%d: %s", round, p.Rounds, s.Name()))
			start := time.Now()
			results = append(results, runSystem(ctx, client, s, p))
			fmt.Fprintf(os.Stderr, "bench: %s took %v\n", s.Name(), time.Since(start).Round(100*time.Millisecond))
		}
		rep.Rounds = append(rep.Rounds, results)
	}
	rep.Systems = mergeRounds(rep.Rounds)
	if len(rep.Rounds) < 2 {
		rep.Rounds = nil // the one round is Systems
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
	rep.Ranges = ranges(rep)
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
		if !(isPrioq && ps.mode == prioq.AtLeastOnce && ps.layout.String() == prioq.Levels(levels).String()) && s.Name() != rawLoop {
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
