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

func find(r *report, name string) *sysResult {
	for _, s := range r.Systems {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func verdict(ok bool) *bool { return &ok }

func budgets(r *report) []budget {
	var out []budget
	add := func(what, want, got string, met *bool) { out = append(out, budget{what, want, got, met}) }
	rel := find(r, "prioq levels reliable")
	fast := find(r, "prioq levels fast")
	raw := find(r, "raw list loop (seed 001)")
	ceil := find(r, "raw pipelined RPUSH+LPOP (ceiling)")
	asq := find(r, "asynq (peer)")
	rate := func(s *sysResult, batched bool) float64 {
		if s == nil {
			return 0
		}
		t := s.E2E
		if batched {
			t = s.E2EBatch
		}
		if t == nil {
			return 0
		}
		return t.Rate
	}
	if rel != nil && rel.E2E != nil {
		c := rel.E2E.CmdsPerMsg
		add("Redis commands per reliable message (enqueue+take+ack, Lua calls counted)", "≤ 10",
			fmt.Sprintf("%.1f single calls; %.1f batched", c, ptrCmds(rel.E2EBatch)), verdict(c <= 10))
		add("Redis CPU per reliable message (INFO cpu)", "≤ 20 µs", fmt.Sprintf("%.1f µs single; %.1f µs batched",
			rel.E2E.CPUPerMsg, ptrCPU(rel.E2EBatch)), verdict(rel.E2E.CPUPerMsg <= 20))
	}
	if rel != nil && raw != nil && rate(raw, false) > 0 {
		x := rate(rel, false) / rate(raw, false)
		add("end to end, AtLeastOnce, single calls, 32 workers vs raw list loop", "≥ 0.7×",
			fmt.Sprintf("%.2f× (%.0f vs %.0f msg/s)", x, rate(rel, false), rate(raw, false)), verdict(x >= 0.7))
	}
	if rel != nil && asq != nil && rate(asq, false) > 0 {
		x := rate(rel, false) / rate(asq, false)
		add("end to end, AtLeastOnce vs asynq", "≥ 3×",
			fmt.Sprintf("%.2f× (%.0f vs %.0f msg/s)", x, rate(rel, false), rate(asq, false)), verdict(x >= 3))
	} else {
		add("end to end, AtLeastOnce vs asynq", "≥ 3×", "not run (-quick, -no-asynq or -only)", nil)
	}
	if fast != nil && raw != nil && rate(raw, false) > 0 {
		x := rate(fast, false) / rate(raw, false)
		add("end to end, AtMostOnce vs raw list loop", "≥ 0.9×",
			fmt.Sprintf("%.2f× (%.0f vs %.0f msg/s)", x, rate(fast, false), rate(raw, false)), verdict(x >= 0.9))
	}
	if rel != nil && ceil != nil && rate(ceil, true) > 0 {
		x := rate(rel, true) / rate(ceil, true)
		add("end to end, batched enqueue + batched take/ack vs raw pipelined ceiling", "≥ 25%",
			fmt.Sprintf("%.0f%% (%.0f vs %.0f msg/s)", 100*x, rate(rel, true), rate(ceil, true)), verdict(x >= 0.25))
	}
	for _, s := range []*sysResult{rel, fast} {
		if s != nil && s.Pickup != nil && s.Pickup.Samples > 0 {
			add("idle pickup latency, "+s.Name, "p50 ≤ 0.5 ms, p99 ≤ 2 ms",
				fmt.Sprintf("p50 %.2f ms, p99 %.2f ms, max %.2f ms", s.Pickup.P50, s.Pickup.P99, s.Pickup.Max),
				verdict(s.Pickup.P50 <= 0.5 && s.Pickup.P99 <= 2))
		}
	}
	for _, s := range []*sysResult{rel, fast} {
		if s != nil && s.Late != nil && s.Late.Samples > 0 {
			add("delayed lateness, "+s.Name, "p99 ≤ 5 ms",
				fmt.Sprintf("p50 %.2f ms, p99 %.2f ms, max %.2f ms", s.Late.P50, s.Late.P99, s.Late.Max), verdict(s.Late.P99 <= 5))
		}
	}
	for _, s := range []*sysResult{rel, find(r, "prioq range reliable")} {
		if s != nil && s.MemPerMsg != nil {
			add("Redis memory per waiting message beyond payload, "+s.Name, "≤ 100 bytes",
				fmt.Sprintf("%.0f bytes", *s.MemPerMsg), verdict(*s.MemPerMsg <= 100))
		}
	}
	for _, s := range []*sysResult{rel, fast} {
		if s != nil && s.IdleRate != nil {
			add("idle load, "+s.Name, "≤ 1 command/s per idle consumer",
				fmt.Sprintf("%.2f commands/s", *s.IdleRate), verdict(*s.IdleRate <= 1))
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

func ptrCmds(t *throughput) float64 {
	if t == nil {
		return math.NaN()
	}
	return t.CmdsPerMsg
}

func ptrCPU(t *throughput) float64 {
	if t == nil {
		return math.NaN()
	}
	return t.CPUPerMsg
}

func markdown(r *report) string {
	var b strings.Builder
	m := r.Machine
	profile := r.Params.Profile
	if profile == "" { // results saved before profiles had names
		profile = map[bool]string{true: "quick", false: "full"}[r.Params.Quick]
	}
	fmt.Fprintf(&b, "## prioq benchmark (%s)\n\n", profile)
	fmt.Fprintf(&b, "Redis %s (%s); %d cores; %s %s; %s. %d messages of 64 bytes per throughput run, %d producers, %d workers (batched: %d workers × %d).\n\n",
		m.Redis, m.RedisFrom, m.Cores, m.Go, m.OS, m.Date, r.Params.Messages, r.Params.Producers, r.Params.Workers, r.Params.BatchWorkers, r.Params.Batch)
	b.WriteString("| system | reliable | enqueue/s | take/s | end to end/s | ×raw | batched/s | cmds/msg | CPU µs/msg | pickup p50/p99 ms | late p99 ms | mem B/msg | idle cmd/s | inversions | dups |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	raw := find(r, "raw list loop (seed 001)")
	for _, s := range r.Systems {
		x := "–"
		if raw != nil && raw.E2E != nil && s.E2E != nil && raw.E2E.Rate > 0 {
			x = fmt.Sprintf("%.2f", s.E2E.Rate/raw.E2E.Rate)
		}
		dups := int64(0)
		for _, t := range []*throughput{s.Take, s.E2E, s.E2EBatch, s.Drain} {
			if t != nil {
				dups += t.Duplicates
			}
		}
		fmt.Fprintf(&b, "| %s | %v | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			s.Name, yes(s.Reliable), tput(s.Enqueue), tput(s.Take), tput(s.E2E), x, tput(s.E2EBatch),
			cmds(s.E2E), cpu(s.E2E), lat2(s.Pickup), late(s.Late), f0(s.MemPerMsg), f2(s.IdleRate), inv(s), dups)
	}
	b.WriteString("\n`*` = the phase hit its time limit; the rate is what it handled in that time.\n")
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
		b.WriteString("\n### Scale (AtLeastOnce; server µs per operation from INFO commandstats, wall µs per call on one client)\n\n")
		b.WriteString("| curve | x | enqueue srv µs | take srv µs | enqueue wall µs | take wall µs |\n|---|---|---|---|---|---|\n")
		for _, c := range []struct {
			name string
			pts  []costPoint
		}{{"depth, levels", sc.DepthLevels}, {"depth, range", sc.DepthRange}, {"lanes, work in the lowest", sc.Lanes},
			{"lanes, work in the top", sc.LanesTop}, {"segments, work in the lowest", sc.Segments}} {
			for _, p := range c.pts {
				fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | %.0f | %.0f |\n", c.name, p.X, p.EnqueueSrvUs, p.TakeSrvUs, p.EnqueueUs, p.TakeUs)
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
	raw, peer := find(r, "raw list loop (seed 001)"), find(r, "asynq (peer)")
	ratio := func(s, ref *sysResult) string {
		if ref == nil || ref.E2E == nil || ref.E2E.Rate <= 0 || s.E2E == nil {
			return "–"
		}
		return fmt.Sprintf("%.2f×", s.E2E.Rate/ref.E2E.Rate)
	}
	b.WriteString("\n### Comparison (end to end, 32 workers, same run)\n\n")
	b.WriteString("Redis CPU µs per message (INFO cpu, enqueue + take + ack) is what bounds one Redis: the ceiling column is 10⁶ / that, the messages per second one fully busy Redis core would carry.\n\n")
	b.WriteString("| system | reliable | priorities | msg/s | vs raw list loop | vs asynq | Redis CPU µs/msg | ceiling msg/s per Redis core | idle pickup p50 ms |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Systems {
		if !strings.HasPrefix(s.Name, "prioq") && s != raw && s != peer {
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Name, yes(s.Reliable), yes(s.Priorities),
			tput(s.E2E), ratio(s, raw), ratio(s, peer), cpu(s.E2E), ceiling(s.E2E), p50(s.Pickup))
	}
	var drains []*sysResult
	for _, s := range r.Systems {
		if s.Drain != nil {
			drains = append(drains, s)
		}
	}
	if len(drains) > 0 {
		fmt.Fprintf(b, "\n#### Drain %d pre-enqueued messages (32 workers)\n\n", r.Params.DrainMessages)
		b.WriteString("| system | msg/s | vs raw list loop | Redis CPU µs/msg | ceiling msg/s per Redis core |\n|---|---|---|---|---|\n")
		for _, s := range drains {
			x := "–"
			if raw != nil && raw.Drain != nil && raw.Drain.Rate > 0 {
				x = fmt.Sprintf("%.2f×", s.Drain.Rate/raw.Drain.Rate)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", s.Name, tput(s.Drain), x, cpu(s.Drain), ceiling(s.Drain))
		}
	}
	if peer == nil {
		b.WriteString("\nasynq was not run (-quick, -no-asynq or -only).\n")
	}
}

func ceiling(t *throughput) string {
	if t == nil || t.CPUPerMsg <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", 1e6/t.CPUPerMsg)
}

func p50(l *latency) string {
	if l == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", l.P50)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func tput(t *throughput) string {
	if t == nil {
		return "–"
	}
	s := fmt.Sprintf("%.0f", t.Rate)
	if t.TimedOut {
		s += "*"
	}
	return s
}

func cmds(t *throughput) string {
	if t == nil || t.Handled == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", t.CmdsPerMsg)
}

func cpu(t *throughput) string {
	if t == nil || t.Handled == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", t.CPUPerMsg)
}

func lat2(l *latency) string {
	if l == nil || l.Samples == 0 {
		return "–"
	}
	s := fmt.Sprintf("%.2f / %.2f", l.P50, l.P99)
	if l.Missing > 0 {
		s += fmt.Sprintf(" (%d lost)", l.Missing)
	}
	return s
}

func late(l *latency) string {
	if l == nil || l.Samples == 0 {
		return "–"
	}
	s := fmt.Sprintf("%.1f", l.P99)
	if l.Early > 0 {
		s += fmt.Sprintf(" (%d early)", l.Early)
	}
	return s
}

func f0(f *float64) string {
	if f == nil {
		return "–"
	}
	return fmt.Sprintf("%.0f", *f)
}

func f2(f *float64) string {
	if f == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", *f)
}

func inv(s *sysResult) string {
	if s.Inversions == nil {
		return "n/a"
	}
	return fmt.Sprintf("%d/%d", *s.Inversions, s.InvOf)
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
