package main

import (
	"context"
	"fmt"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// single.go: the runs of one measure alone, -e2e and -drain, in interleaved
// rounds with a line per run (main.go's full run measures every phase).

// runEndToEnd is -e2e: only the end-to-end single-call run of each system,
// in p.Rounds interleaved rounds, a line per run, then each system's median
// and range (and its ratio to the raw list loop, round by round, when that
// ran too).
func runEndToEnd(ctx context.Context, c radix.Client, run []system, p params) {
	runRounds(run, p, false, func(s system) (*throughput, error) {
		t, err := endToEnd(ctx, c, s, p.Messages, p.Producers, 1, p.Workers, 1, time.Minute)
		return &t, err
	})
}

// runDrains is -drain: only the drain of a pre-filled queue (DrainMessages)
// of each system that has one (the reliable levels ones, single calls and
// Run, and the raw loop), as runEndToEnd does its runs.
func runDrains(ctx context.Context, c radix.Client, run []system, p params) {
	var drained []system
	for _, s := range run {
		if ps, ok := s.(*prioqSystem); ok && ps.mode == prioq.AtLeastOnce && ps.enqueueMW == nil &&
			ps.layout.String() == prioq.Levels(levels).String() || s.Name() == rawLoop {
			drained = append(drained, s)
		}
	}
	limit := 20 * time.Duration(p.PhaseLimit*float64(time.Second))
	runRounds(drained, p, true, func(s system) (*throughput, error) {
		t, err := drain(ctx, c, s, p.DrainMessages, p.Workers, limit)
		return &t, err
	})
}

// runRounds measures each system with measure in p.Rounds interleaved
// rounds, prints a line per run, then each system's medians (and its ratio
// to the raw list loop, round by round, when that ran too): drains, or
// end-to-end runs.
func runRounds(run []system, p params, drains bool, measure func(system) (*throughput, error)) {
	ph := e2ePhase
	if drains {
		ph = drainPhase
	}
	rep := &report{}
	for round := 1; round <= p.Rounds; round++ {
		var results []*sysResult
		for _, s := range run {
			t, err := measure(s)
			if err != nil {
				fatal(err)
			}
			fmt.Printf("%-12s %-58s %8.0f msg/s  %.2f trips/msg  %.1f cmds/msg  %.1f us CPU/msg  %.1f us client CPU/msg\n",
				fmt.Sprintf("round %d/%d", round, p.Rounds), s.Name(), t.Rate, t.TripsPerMsg, t.CmdsPerMsg, t.CPUPerMsg, t.ClientCPUPerMsg)
			r := &sysResult{Name: s.Name()}
			if drains {
				r.Drain = t
			} else {
				r.E2E = t
			}
			results = append(results, r)
		}
		rep.Rounds = append(rep.Rounds, results)
	}
	if p.Rounds < 2 {
		return
	}
	rep.Systems = mergeRounds(rep.Rounds)
	raw := find(rep, rawLoop)
	for _, s := range rep.Systems {
		line := fmt.Sprintf("%-12s %-58s %8s msg/s  %s trips/msg  %s cmds/msg  %s us CPU/msg", fmt.Sprintf("median of %d", p.Rounds), s.Name,
			med(rep.values(s, rateIn(ph)), 0, ""), med(rep.values(s, tripsIn(ph)), 2, ""),
			med(rep.values(s, cmdsIn(ph)), 1, ""), med(rep.values(s, cpuIn(ph)), 1, ""))
		line += "  " + med(rep.values(s, clientCPUIn(ph)), 1, "") + " us client CPU/msg"
		if raw != nil {
			line += "  " + med(rep.ratios(s, raw, rateIn(ph)), 2, "×") + " raw (Redis CPU " +
				med(rep.ratios(s, raw, cpuIn(ph)), 2, "×") + ", client CPU " + med(rep.ratios(s, raw, clientCPUIn(ph)), 2, "×") + ")"
		}
		fmt.Println(line)
	}
}
