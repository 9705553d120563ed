package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

type budget struct {
	What     string `json:"what"`
	Budget   string `json:"budget"`
	Measured string `json:"measured"`
	Met      *bool  `json:"met,omitempty"` // nil: not measured in this run
}

// The reference systems the report compares with, by name.
const (
	rawLoop   = "raw list loop (seed 001)"
	ceilLoop  = "raw pipelined RPUSH+LPOP (ceiling)"
	asynqPeer = "asynq (peer)"
)

func find(r *report, name string) *sysResult { return findIn(r.Systems, name) }

func verdict(ok bool) *bool { return &ok }

// budgets judges each budget by the median over the rounds (see rounds.go);
// the measured text gives the range beside it.
func budgets(r *report) []budget {
	var out []budget
	add := func(what, want, got string, met *bool) { out = append(out, budget{what, want, got, met}) }
	rel := find(r, "prioq levels reliable")
	fast := find(r, "prioq levels fast")
	raw := find(r, rawLoop)
	ceil := find(r, ceilLoop)
	asq := find(r, asynqPeer)
	e2e, batched := rateIn(e2ePhase), rateIn(batchPhase)
	// versus is the rates behind a ratio: medians when there were rounds.
	versus := func(a, b *sysResult, f figure) string {
		va, vb := r.values(a, f), r.values(b, f)
		if len(va) > 1 || len(vb) > 1 {
			return fmt.Sprintf("; medians %.0f vs %.0f msg/s", median(va), median(vb))
		}
		return fmt.Sprintf(" (%.0f vs %.0f msg/s)", median(va), median(vb))
	}
	if c := r.values(rel, cmdsIn(e2ePhase)); len(c) > 0 {
		add("Redis commands per reliable message (enqueue+take+ack, Lua calls counted)", "≤ 10",
			fmt.Sprintf("%s, single calls; batched %s", overRounds(c, 1, ""), med(r.values(rel, cmdsIn(batchPhase)), 1, "")),
			verdict(median(c) <= 10))
	}
	if c := r.values(rel, cpuIn(e2ePhase)); len(c) > 0 {
		add("Redis CPU per reliable message (INFO cpu)", "≤ 20 µs",
			fmt.Sprintf("%s, single calls; batched %s", overRounds(c, 1, " µs"), med(r.values(rel, cpuIn(batchPhase)), 1, " µs")),
			verdict(median(c) <= 20))
	}
	if x := r.ratios(find(r, "prioq levels reliable, groups=1000"), rel, cpuIn(e2ePhase)); len(x) > 0 {
		add("Redis CPU per reliable message, 1,000 groups vs none (INFO cpu, single calls)", "≤ 1.5× (issue 22)",
			overRounds(x, 2, "×"), verdict(median(x) <= 1.5))
	}
	if x := r.ratios(rel, raw, e2e); len(x) > 0 {
		add("end to end, AtLeastOnce, single calls, 32 workers vs raw list loop", "≥ 0.7×",
			overRounds(x, 2, "×")+versus(rel, raw, e2e), verdict(median(x) >= 0.7))
	}
	if x := r.ratios(rel, asq, e2e); len(x) > 0 {
		add("end to end, AtLeastOnce vs asynq", "≥ 3×",
			overRounds(x, 2, "×")+versus(rel, asq, e2e), verdict(median(x) >= 3))
	} else {
		add("end to end, AtLeastOnce vs asynq", "≥ 3×", "not run (-quick, -no-asynq or -only)", nil)
	}
	if x := r.ratios(fast, raw, e2e); len(x) > 0 {
		add("end to end, AtMostOnce vs raw list loop", "≥ 0.9×",
			overRounds(x, 2, "×")+versus(fast, raw, e2e), verdict(median(x) >= 0.9))
	}
	if x := r.ratios(rel, ceil, batched); len(x) > 0 {
		pct := make([]float64, len(x))
		for i := range x {
			pct[i] = 100 * x[i]
		}
		add("end to end, batched enqueue + batched take/ack vs raw pipelined ceiling", "≥ 25%",
			overRounds(pct, 0, "%")+versus(rel, ceil, batched), verdict(median(x) >= 0.25))
	}
	for _, s := range []*sysResult{rel, fast} {
		p50, p99 := r.values(s, p50In(pickupOf)), r.values(s, p99In(pickupOf))
		if len(p50) > 0 && len(p99) > 0 {
			add("idle pickup latency, "+s.Name, "p50 ≤ 0.5 ms, p99 ≤ 2 ms",
				fmt.Sprintf("p50 %s; p99 %s; max %.2f ms", overRounds(p50, 2, " ms"), overRounds(p99, 2, " ms"), s.Pickup.Max),
				verdict(median(p50) <= 0.5 && median(p99) <= 2))
		}
	}
	for _, s := range []*sysResult{rel, fast} {
		p50, p99 := r.values(s, p50In(lateOf)), r.values(s, p99In(lateOf))
		if len(p99) > 0 {
			add("delayed lateness, "+s.Name, "p99 ≤ 5 ms",
				fmt.Sprintf("p99 %s; p50 %s; max %.2f ms", overRounds(p99, 2, " ms"), med(p50, 2, " ms"), s.Late.Max),
				verdict(median(p99) <= 5))
		}
	}
	for _, s := range []*sysResult{rel, find(r, "prioq range reliable")} {
		if v := r.values(s, memFig); len(v) > 0 {
			add("Redis memory per waiting message beyond payload, "+s.Name, "≤ 100 bytes",
				overRounds(v, 0, " bytes"), verdict(median(v) <= 100))
		}
	}
	for _, s := range []*sysResult{rel, fast} {
		if v := r.values(s, idleFig); len(v) > 0 {
			add("idle load, "+s.Name, "≤ 1 command/s per idle consumer",
				overRounds(v, 2, " commands/s"), verdict(median(v) <= 1))
		}
	}
	if sc := r.Scale; sc != nil && len(sc.DepthLevels) > 1 {
		a, b := sc.DepthLevels[0], sc.DepthLevels[len(sc.DepthLevels)-1]
		x := b.TakeSrvUs / a.TakeSrvUs
		add(fmt.Sprintf("take cost, levels, depth %d → %d", a.X, b.X), "flat",
			fmt.Sprintf("%.1f → %.1f µs server (%.2f×)", a.TakeSrvUs, b.TakeSrvUs, x), verdict(x < 1.2))
		a, b = sc.DepthRange[0], sc.DepthRange[len(sc.DepthRange)-1]
		add(fmt.Sprintf("take cost, range, depth %d → %d", a.X, b.X), "grows as log n",
			fmt.Sprintf("%.1f → %.1f µs server (%.2f×; log ratio %.1f×)", a.TakeSrvUs, b.TakeSrvUs,
				b.TakeSrvUs/a.TakeSrvUs, math.Log(float64(b.X))/math.Log(float64(a.X))), nil)
	}
	if sc := r.Scale; sc != nil && len(sc.Lanes) > 1 {
		for _, c := range []struct {
			what string
			pts  []costPoint
		}{{"work only in the lowest lane (worst case)", sc.Lanes}, {"work in the top lane", sc.LanesTop}} {
			// DESIGN.md §8 says "lanes 2 → 64": start at 2 lanes when measured.
			a, b := c.pts[0], c.pts[len(c.pts)-1]
			for _, p := range c.pts {
				if p.X == 2 {
					a = p
				}
			}
			x := b.TakeSrvUs / a.TakeSrvUs
			add(fmt.Sprintf("take cost, lanes %d → %d, %s, one run per point", a.X, b.X, c.what), "flat",
				fmt.Sprintf("%.1f → %.1f µs server (%.2f×)", a.TakeSrvUs, b.TakeSrvUs, x), verdict(x < 1.2))
		}
	}
	if lc := r.Scale.laneCompare(); lc != nil {
		rounds := fmt.Sprintf("median of %d alternating rounds", lc.Rounds)
		if lc.Rounds == 1 {
			rounds = "one round (-full runs 5)"
		}
		for _, c := range lc.cases() {
			add(fmt.Sprintf("take cost, lanes 2 → 64, %s, %s", c.what, rounds), "≤ 1.1× (issue 11)",
				c.String(), verdict(c.ratio() <= 1.1))
		}
	}
	return out
}

// laneCompare is sc's lane comparison, nil when not measured.
func (sc *scaleResult) laneCompare() *laneCompare {
	if sc == nil || sc.LaneCompare == nil || len(sc.LaneCompare.Lowest2) == 0 || len(sc.LaneCompare.Top2) == 0 {
		return nil
	}
	return sc.LaneCompare
}

// fmtList prints xs as "a/b/c" with one decimal.
func fmtList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(parts, "/")
}

func markdown(r *report) string {
	var b strings.Builder
	m := r.Machine
	profile := r.Params.Profile
	if profile == "" { // results saved before profiles had names
		profile = map[bool]string{true: "quick", false: "full"}[r.Params.Quick]
	}
	rounds := max(len(r.Rounds), 1)
	if rounds > 1 {
		fmt.Fprintf(&b, "## prioq benchmark (%s; medians of %d interleaved rounds)\n\n", profile, rounds)
	} else {
		fmt.Fprintf(&b, "## prioq benchmark (%s; one round)\n\n", profile)
	}
	fmt.Fprintf(&b, "Server %s (%s); %d cores; %s %s; %s. %d messages of 64 bytes per throughput run, %d producers, %d workers (batched: %d workers × %d).\n\n",
		m.Redis, m.RedisFrom, m.Cores, m.Go, m.OS, m.Date, r.Params.Messages, r.Params.Producers, r.Params.Workers, r.Params.BatchWorkers, r.Params.Batch)
	if rounds > 1 {
		fmt.Fprintf(&b, "Every system ran once in each of %d interleaved rounds (A B C … A B C …). Each figure is its median over the rounds, "+
			"with the range (min–max) in brackets where the rounds differ; a ratio is taken round by round (a system over the raw list loop of the same round), "+
			"then its median. A budget is met when its median meets it.", rounds)
		switch peer := find(r, asynqPeer) != nil; {
		case peer && r.Scale != nil:
			b.WriteString(" asynq and the scale curves ran once: a ratio to asynq divides each round by its one figure, and asynq's idle window is as long as the rounds' together.")
		case peer:
			b.WriteString(" asynq ran once: a ratio to asynq divides each round by its one figure, and its idle window is as long as the rounds' together.")
		case r.Scale != nil:
			b.WriteString(" The scale curves ran once.")
		}
		b.WriteString("\n\n")
	}
	b.WriteString("| system | reliable | enqueue/s | take/s | end to end/s | ×raw | batched/s | round trips/msg | cmds/msg | CPU µs/msg | pickup p50/p99 ms | late p99 ms | mem B/msg | idle cmd/s | inversions | dups |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	raw := find(r, rawLoop)
	for _, s := range r.Systems {
		dups := int64(0)
		for _, t := range []*throughput{s.Take, s.E2E, s.E2EBatch, s.Drain} {
			if t != nil {
				dups += t.Duplicates
			}
		}
		fmt.Fprintf(&b, "| %s | %v | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			s.Name, yes(s.Reliable), r.tput(s, enqueuePhase), r.tput(s, takePhase), r.tput(s, e2ePhase),
			med(r.ratios(s, raw, rateIn(e2ePhase)), 2, ""), r.tput(s, batchPhase),
			med(r.values(s, tripsIn(e2ePhase)), 2, ""), med(r.values(s, cmdsIn(e2ePhase)), 1, ""), med(r.values(s, cpuIn(e2ePhase)), 1, ""), r.pickup(s), r.late(s),
			med(r.values(s, memFig), 0, ""), med(r.values(s, idleFig), 2, ""), r.inv(s), dups)
	}
	if rounds > 1 {
		b.WriteString("\n`*` = the phase hit its time limit in at least one round; the rate is what it handled in that time. Duplicates, lost and early messages are summed over the rounds.\n")
	} else {
		b.WriteString("\n`*` = the phase hit its time limit; the rate is what it handled in that time.\n")
	}
	for _, s := range r.Systems {
		for _, e := range s.Errors {
			fmt.Fprintf(&b, "- %s: %s\n", s.Name, e)
		}
	}
	b.WriteString("\n### Budgets (DESIGN.md §8)\n\n| what | budget | measured | met |\n|---|---|---|---|\n")
	for _, bu := range r.Budgets {
		met := "not judged"
		if bu.Met != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*bu.Met]
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", bu.What, bu.Budget, bu.Measured, met)
	}
	if sc := r.Scale; sc != nil {
		b.WriteString("\n### Scale (AtLeastOnce; one run per point; server µs per operation from INFO commandstats, where a script's or an EXEC's inner commands count twice; Redis CPU µs per operation from INFO cpu, round trip included; wall µs per call on one client)\n\n")
		b.WriteString("| curve | x | enqueue srv µs | take srv µs | enqueue CPU µs | take CPU µs | enqueue wall µs | take wall µs |\n|---|---|---|---|---|---|---|---|\n")
		for _, c := range []struct {
			name string
			pts  []costPoint
		}{{"depth, levels", sc.DepthLevels}, {"depth, range (every priority its own)", sc.DepthRange},
			{"depth, range, 1,000 priorities", sc.DepthRangeRepeat}, {"depth, RangeSorted (every priority its own)", sc.DepthRangeSorted},
			{"lanes, work in the lowest", sc.Lanes},
			{"lanes, work in the top", sc.LanesTop}, {"segments, work in the lowest", sc.Segments}} {
			for _, p := range c.pts {
				fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | %.1f | %.1f | %.0f | %.0f |\n", c.name, p.X, p.EnqueueSrvUs, p.TakeSrvUs,
					p.EnqueueCPUUs, p.TakeCPUUs, p.EnqueueUs, p.TakeUs)
			}
		}
		b.WriteString("\n| consumers | prioq reliable msg/s | raw list loop msg/s | ratio |\n|---|---|---|---|\n")
		for _, p := range sc.Consumers {
			fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f |\n", p.Consumers, p.Prioq, p.Raw, p.Prioq/math.Max(p.Raw, 1))
		}
	}
	comparison(&b, r)
	return b.String()
}

// comparison ends the report with the figures a reader compares first: end
// to end throughput and Redis CPU per message, as ratios to the raw list
// loop and to asynq measured in the same run.
func comparison(b *strings.Builder, r *report) {
	raw, peer := find(r, rawLoop), find(r, asynqPeer)
	e2e := rateIn(e2ePhase)
	title := "same run"
	if n := len(r.Rounds); n > 1 {
		title = fmt.Sprintf("medians of %d interleaved rounds, min–max in brackets", n)
	}
	fmt.Fprintf(b, "\n### Comparison (end to end, 32 workers, %s)\n\n", title)
	b.WriteString("Redis CPU µs per message (INFO cpu, enqueue + take + ack) is what bounds one Redis: the ceiling column is 10⁶ / that, the messages per second one fully busy Redis core would carry.\n\n")
	b.WriteString("| system | reliable | priorities | msg/s | vs raw list loop | vs asynq | Redis CPU µs/msg | ceiling msg/s per Redis core | idle pickup p50 ms |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Systems {
		if !strings.HasPrefix(s.Name, "prioq") && s != raw && s != peer {
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Name, yes(s.Reliable), yes(s.Priorities),
			r.tput(s, e2ePhase), med(r.ratios(s, raw, e2e), 2, "×"), med(r.ratios(s, peer, e2e), 2, "×"),
			med(r.values(s, cpuIn(e2ePhase)), 1, ""), med(r.values(s, ceilingIn(e2ePhase)), 0, ""),
			med(r.values(s, p50In(pickupOf)), 2, ""))
	}
	var drains []*sysResult
	for _, s := range r.Systems {
		if s.Drain != nil {
			drains = append(drains, s)
		}
	}
	if len(drains) > 0 {
		fmt.Fprintf(b, "\n#### Drain %d pre-enqueued messages (32 workers)\n\n", r.Params.DrainMessages)
		b.WriteString("| system | msg/s | vs raw list loop | round trips/msg | Redis CPU µs/msg | ceiling msg/s per Redis core |\n|---|---|---|---|---|---|\n")
		for _, s := range drains {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", s.Name, r.tput(s, drainPhase),
				med(r.ratios(s, raw, rateIn(drainPhase)), 2, "×"), med(r.values(s, tripsIn(drainPhase)), 2, ""),
				med(r.values(s, cpuIn(drainPhase)), 1, ""),
				med(r.values(s, ceilingIn(drainPhase)), 0, ""))
		}
	}
	if peer == nil {
		b.WriteString("\nasynq was not run (-quick, -no-asynq or -only).\n")
	}
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// tput is a phase's rate over the rounds, with a * when it hit its time
// limit in any.
func (r *report) tput(s *sysResult, ph phase) string {
	t := ph(s)
	if t == nil {
		return "–"
	}
	out := med(r.values(s, rateIn(ph)), 0, "")
	if t.TimedOut {
		out += "*"
	}
	return out
}

func (r *report) pickup(s *sysResult) string {
	if s.Pickup == nil || s.Pickup.Samples == 0 {
		return "–"
	}
	out := med(r.values(s, p50In(pickupOf)), 2, "") + " / " + med(r.values(s, p99In(pickupOf)), 2, "")
	if s.Pickup.Missing > 0 {
		out += fmt.Sprintf(" (%d lost)", s.Pickup.Missing)
	}
	return out
}

func (r *report) late(s *sysResult) string {
	if s.Late == nil || s.Late.Samples == 0 {
		return "–"
	}
	out := med(r.values(s, p99In(lateOf)), 1, "")
	if s.Late.Early > 0 {
		out += fmt.Sprintf(" (%d early)", s.Late.Early)
	}
	return out
}

func (r *report) inv(s *sysResult) string {
	if s.Inversions == nil {
		return "n/a"
	}
	return fmt.Sprintf("%s/%d", med(r.values(s, invFig), 0, ""), s.InvOf)
}

// plots writes throughput vs consumers, the idle pickup latency CDF and cost
// vs depth as PNG files.
func plots(r *report, dir string) error {
	if sc := r.Scale; sc != nil && len(sc.Consumers) > 0 {
		p := plot.New()
		p.Title.Text = "End-to-end throughput vs consumers"
		p.X.Label.Text = "consumers (single-message calls)"
		p.Y.Label.Text = "messages/s"
		var a, b plotter.XYs
		for _, c := range sc.Consumers {
			a = append(a, plotter.XY{X: float64(c.Consumers), Y: c.Prioq})
			b = append(b, plotter.XY{X: float64(c.Consumers), Y: c.Raw})
		}
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		if err := plotutil.AddLinePoints(p, "prioq reliable", a, "raw list loop", b); err != nil {
			return err
		}
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs = vg.Inch / 2
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "throughput-vs-consumers.png")); err != nil {
			return err
		}
	}
	{
		p := plot.New()
		p.Title.Text = "Idle pickup latency (enqueue → handler start), CDF"
		p.X.Label.Text = "ms (log scale)"
		p.Y.Label.Text = "fraction of messages"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		var args []interface{}
		for _, s := range r.Systems {
			if len(s.PickupRaw) == 0 || s.Pickup == nil || s.Pickup.P99 > 5 {
				continue // the polling seeds (8 ms to 1 s) are in the table
			}
			v := slices.Clone(s.PickupRaw)
			slices.Sort(v)
			var xy plotter.XYs
			for i, d := range v {
				xy = append(xy, plotter.XY{X: d, Y: float64(i+1) / float64(len(v))})
			}
			args = append(args, s.Name, xy)
		}
		if len(args) > 0 {
			if err := plotutil.AddLines(p, args...); err != nil {
				return err
			}
			p.Legend.Top, p.Legend.Left = false, false
			p.Legend.YOffs = vg.Inch / 4
			p.Add(plotter.NewGrid())
			if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "pickup-latency-cdf.png")); err != nil {
				return err
			}
		}
	}
	if sc := r.Scale; sc != nil && len(sc.DepthLevels) > 0 {
		p := plot.New()
		p.Title.Text = "Server cost per call vs queue depth (AtLeastOnce)"
		p.X.Label.Text = "messages waiting"
		p.Y.Label.Text = "µs of Redis time per call"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		line := func(pts []costPoint, take bool) plotter.XYs {
			var xy plotter.XYs
			for _, pt := range pts {
				y := pt.EnqueueSrvUs
				if take {
					y = pt.TakeSrvUs
				}
				xy = append(xy, plotter.XY{X: float64(pt.X), Y: y})
			}
			return xy
		}
		if err := plotutil.AddLinePoints(p,
			"levels enqueue", line(sc.DepthLevels, false), "levels take", line(sc.DepthLevels, true),
			"range enqueue", line(sc.DepthRange, false), "range take", line(sc.DepthRange, true)); err != nil {
			return err
		}
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = false, true
		p.Legend.YOffs = vg.Inch / 2
		p.Add(plotter.NewGrid())
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "cost-vs-depth.png")); err != nil {
			return err
		}
	}
	return nil
}
