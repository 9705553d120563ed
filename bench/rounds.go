package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Rounds: the systems run in interleaved rounds, every system once per round
// (A B C … A B C …), because on a small shared machine one figure swings
// ±30% between runs, and one run per system cannot say whether a budget is
// met. A system's reported figure is its median over the rounds, shown with
// its range; a budget is met when the median meets it. A ratio is taken
// round by round (a system over the reference measured in the same round),
// then its median: a slow spell of the machine slows both sides of one
// round's ratio, and the rounds it spans are not compared with others.

// figure reads one number from a system's results; ok is false when the
// system did not measure it.
type figure func(s *sysResult) (v float64, ok bool)

// phase picks one throughput phase from a system's results.
type phase func(s *sysResult) *throughput

func enqueuePhase(s *sysResult) *throughput { return s.Enqueue }
func takePhase(s *sysResult) *throughput    { return s.Take }
func e2ePhase(s *sysResult) *throughput     { return s.E2E }
func batchPhase(s *sysResult) *throughput   { return s.E2EBatch }
func drainPhase(s *sysResult) *throughput   { return s.Drain }

// rateIn is a phase's messages per second.
func rateIn(ph phase) figure {
	return func(s *sysResult) (float64, bool) {
		if t := ph(s); t != nil {
			return t.Rate, true
		}
		return 0, false
	}
}

// cmdsIn is a phase's Redis commands per message, when it handled any.
func cmdsIn(ph phase) figure {
	return func(s *sysResult) (float64, bool) {
		if t := ph(s); t != nil && t.Handled > 0 {
			return t.CmdsPerMsg, true
		}
		return 0, false
	}
}

// tripsIn is a phase's round trips per message, when it handled any.
func tripsIn(ph phase) figure {
	return func(s *sysResult) (float64, bool) {
		if t := ph(s); t != nil && t.Handled > 0 {
			return t.TripsPerMsg, true
		}
		return 0, false
	}
}

// cpuIn is a phase's Redis CPU µs per message, when it handled any.
func cpuIn(ph phase) figure {
	return func(s *sysResult) (float64, bool) {
		if t := ph(s); t != nil && t.Handled > 0 {
			return t.CPUPerMsg, true
		}
		return 0, false
	}
}

// clientCPUIn is a phase's client (bench process) CPU µs per message, when
// it handled any and the run measured it.
func clientCPUIn(ph phase) figure {
	return func(s *sysResult) (float64, bool) {
		if t := ph(s); t != nil && t.Handled > 0 && t.ClientCPUPerMsg > 0 {
			return t.ClientCPUPerMsg, true
		}
		return 0, false
	}
}

// ceilingIn is 10⁶ / a phase's Redis CPU µs per message: the messages a
// second one fully busy Redis core would carry.
func ceilingIn(ph phase) figure {
	return func(s *sysResult) (float64, bool) {
		if t := ph(s); t != nil && t.Handled > 0 && t.CPUPerMsg > 0 {
			return 1e6 / t.CPUPerMsg, true
		}
		return 0, false
	}
}

// latencyOf picks one latency from a system's results.
type latencyOf func(s *sysResult) *latency

func pickupOf(s *sysResult) *latency { return s.Pickup }
func lateOf(s *sysResult) *latency   { return s.Late }

// p50In and p99In are a latency's percentiles, when it has samples.
func p50In(l latencyOf) figure {
	return func(s *sysResult) (float64, bool) {
		if x := l(s); x != nil && x.Samples > 0 {
			return x.P50, true
		}
		return 0, false
	}
}

func p99In(l latencyOf) figure {
	return func(s *sysResult) (float64, bool) {
		if x := l(s); x != nil && x.Samples > 0 {
			return x.P99, true
		}
		return 0, false
	}
}

func memFig(s *sysResult) (float64, bool) {
	if s.MemPerMsg == nil {
		return 0, false
	}
	return *s.MemPerMsg, true
}

func idleFig(s *sysResult) (float64, bool) {
	if s.IdleRate == nil {
		return 0, false
	}
	return *s.IdleRate, true
}

func invFig(s *sysResult) (float64, bool) {
	if s.Inversions == nil {
		return 0, false
	}
	return float64(*s.Inversions), true
}

// findIn is the named system's result in rs, nil when it is not there.
func findIn(rs []*sysResult, name string) *sysResult {
	for _, s := range rs {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// roundsOf is the named system's result in each round (nil in a round it
// did not run in), or nil when no round has it: a system measured once
// (the asynq peer) or a results.json saved before rounds.
func (r *report) roundsOf(name string) []*sysResult {
	out := make([]*sysResult, len(r.Rounds))
	found := false
	for i, round := range r.Rounds {
		out[i] = findIn(round, name)
		found = found || out[i] != nil
	}
	if !found {
		return nil
	}
	return out
}

// values is f of s in every round that measured it, in order; for a system
// measured once it is f of s itself.
func (r *report) values(s *sysResult, f figure) []float64 {
	if s == nil {
		return nil
	}
	rs := r.roundsOf(s.Name)
	if rs == nil {
		rs = []*sysResult{s}
	}
	var out []float64
	for _, x := range rs {
		if x == nil {
			continue
		}
		if v, ok := f(x); ok {
			out = append(out, v)
		}
	}
	return out
}

// ratios is f of s over f of ref, round by round. A side measured once (the
// asynq peer) takes its one figure into every round.
func (r *report) ratios(s, ref *sysResult, f figure) []float64 {
	if s == nil || ref == nil {
		return nil
	}
	ss, rs := r.roundsOf(s.Name), r.roundsOf(ref.Name)
	at := func(rounds []*sysResult, once *sysResult, i int) *sysResult {
		if rounds == nil {
			return once
		}
		return rounds[i]
	}
	var out []float64
	for i := range max(len(ss), len(rs), 1) {
		a, b := at(ss, s, i), at(rs, ref, i)
		if a == nil || b == nil {
			continue
		}
		x, aok := f(a)
		y, bok := f(b)
		if aok && bok && y > 0 {
			out = append(out, x/y)
		}
	}
	return out
}

// spreadOf is the median and the range of v (zeros when v is empty).
func spreadOf(v []float64) (med, lo, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	return median(v), slices.Min(v), slices.Max(v)
}

// spread is a figure's median and range over the rounds.
func spread[T any](rows []T, f func(T) float64) (med, lo, hi float64) {
	v := make([]float64, len(rows))
	for i, r := range rows {
		v[i] = f(r)
	}
	return spreadOf(v)
}

// med formats a figure over the rounds: its median with prec decimals and
// unit, then its range in brackets when the rounds differ at that
// precision: "25059 (23110–27004)", "0.62× (0.58–0.66)". "–" when nothing
// was measured.
func med(v []float64, prec int, unit string) string {
	if len(v) == 0 {
		return "–"
	}
	m, lo, hi := spreadOf(v)
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', prec, 64) }
	s := f(m) + unit
	if f(lo) != f(hi) {
		s += " (" + f(lo) + "–" + f(hi) + ")"
	}
	return s
}

// overRounds is a budget's measured figure: "median 0.62× (min–max
// 0.58–0.66) over 3 rounds", or "0.62×" from one round.
func overRounds(v []float64, prec int, unit string) string {
	if len(v) < 2 {
		return med(v, prec, unit)
	}
	m, lo, hi := spreadOf(v)
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', prec, 64) }
	return fmt.Sprintf("median %s%s (min–max %s–%s) over %d rounds", f(m), unit, f(lo), f(hi), len(v))
}

// mergeRounds is one result per system, in the order they ran, each figure
// its median over the rounds. What a median must not hide is kept whole:
// duplicates, lost and early messages are summed over the rounds, a phase
// that hit its time limit in any round is marked so, a latency's Max is the
// largest of any round, its Samples the total, every round's errors are kept
// with its number, and the pickup samples of every round are pooled (the
// latency plot draws them). One round is returned as it is.
func mergeRounds(rounds [][]*sysResult) []*sysResult {
	if len(rounds) == 1 {
		return rounds[0]
	}
	var names []string
	by := map[string][]*sysResult{}
	nums := map[string][]int{}
	for i, round := range rounds {
		for _, s := range round {
			if _, seen := by[s.Name]; !seen {
				names = append(names, s.Name)
			}
			by[s.Name] = append(by[s.Name], s)
			nums[s.Name] = append(nums[s.Name], i+1)
		}
	}
	out := make([]*sysResult, len(names))
	for i, name := range names {
		out[i] = mergeSystem(by[name], nums[name])
	}
	return out
}

// mergeSystem merges one system's results of the rounds nums.
func mergeSystem(rs []*sysResult, nums []int) *sysResult {
	m := &sysResult{Name: rs[0].Name, Reliable: rs[0].Reliable, Priorities: rs[0].Priorities}
	m.Enqueue = mergeThroughput(rs, enqueuePhase)
	m.Take = mergeThroughput(rs, takePhase)
	m.E2E = mergeThroughput(rs, e2ePhase)
	m.E2EBatch = mergeThroughput(rs, batchPhase)
	m.Drain = mergeThroughput(rs, drainPhase)
	m.Pickup = mergeLatency(rs, pickupOf)
	m.Late = mergeLatency(rs, lateOf)
	if v := collect(rs, memFig); len(v) > 0 {
		x := median(v)
		m.MemPerMsg = &x
	}
	if v := collect(rs, idleFig); len(v) > 0 {
		x := median(v)
		m.IdleRate = &x
	}
	if v := collect(rs, invFig); len(v) > 0 {
		n := int(math.Round(median(v)))
		m.Inversions = &n
		m.InvOf = int(math.Round(median(collect(rs, func(s *sysResult) (float64, bool) {
			return float64(s.InvOf), s.Inversions != nil
		}))))
	}
	for i, s := range rs {
		m.PickupRaw = append(m.PickupRaw, s.PickupRaw...)
		for _, e := range s.Errors {
			m.Errors = append(m.Errors, fmt.Sprintf("round %d: %s", nums[i], e))
		}
	}
	return m
}

// collect is f of every result that measured it.
func collect(rs []*sysResult, f figure) []float64 {
	var v []float64
	for _, s := range rs {
		if x, ok := f(s); ok {
			v = append(v, x)
		}
	}
	return v
}

func mergeThroughput(rs []*sysResult, ph phase) *throughput {
	var rate, secs, handled []float64
	m := &throughput{}
	n := 0
	for _, s := range rs {
		t := ph(s)
		if t == nil {
			continue
		}
		if n == 0 {
			m.Target = t.Target
		}
		n++
		rate, secs, handled = append(rate, t.Rate), append(secs, t.Seconds), append(handled, float64(t.Handled))
		m.Duplicates += t.Duplicates
		m.TimedOut = m.TimedOut || t.TimedOut
	}
	if n == 0 {
		return nil
	}
	m.Rate, m.Seconds = median(rate), median(secs)
	m.Handled = int64(math.Round(median(handled)))
	m.CmdsPerMsg = median(collect(rs, cmdsIn(ph)))
	m.CPUPerMsg = median(collect(rs, cpuIn(ph)))
	m.TripsPerMsg = median(collect(rs, tripsIn(ph)))
	return m
}

func mergeLatency(rs []*sysResult, l latencyOf) *latency {
	var m *latency
	for _, s := range rs {
		x := l(s)
		if x == nil {
			continue
		}
		if m == nil {
			m = &latency{}
		}
		m.Max = max(m.Max, x.Max)
		m.Samples += x.Samples
		m.Missing += x.Missing
		m.Early += x.Early
	}
	if m != nil {
		m.P50 = median(collect(rs, p50In(l)))
		m.P99 = median(collect(rs, p99In(l)))
	}
	return m
}

// figRange is one figure of one system over the rounds: its median (the
// figure in "systems") and its range.
type figRange struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Rounds int     `json:"rounds"`
}

// headline names the figures whose range results.json keeps.
var headline = []struct {
	key string
	f   figure
}{
	{"enqueue_per_s", rateIn(enqueuePhase)},
	{"take_per_s", rateIn(takePhase)},
	{"end_to_end_per_s", rateIn(e2ePhase)},
	{"end_to_end_batched_per_s", rateIn(batchPhase)},
	{"drain_per_s", rateIn(drainPhase)},
	{"end_to_end_commands_per_message", cmdsIn(e2ePhase)},
	{"end_to_end_cpu_us_per_message", cpuIn(e2ePhase)},
	{"end_to_end_batched_commands_per_message", cmdsIn(batchPhase)},
	{"end_to_end_batched_cpu_us_per_message", cpuIn(batchPhase)},
	{"drain_cpu_us_per_message", cpuIn(drainPhase)},
	{"idle_pickup_p50_ms", p50In(pickupOf)},
	{"idle_pickup_p99_ms", p99In(pickupOf)},
	{"delayed_lateness_p50_ms", p50In(lateOf)},
	{"delayed_lateness_p99_ms", p99In(lateOf)},
	{"memory_bytes_per_message", memFig},
	{"idle_commands_per_s_per_consumer", idleFig},
	{"priority_inversions", invFig},
}

// ranges is what results.json keeps beside the medians, by system and
// figure: the range of every headline figure over the rounds, and of the
// ratios to the raw list loop and to asynq, taken round by round. nil for a
// run of one round.
func ranges(r *report) map[string]map[string]figRange {
	if len(r.Rounds) < 2 {
		return nil
	}
	raw, peer := find(r, rawLoop), find(r, asynqPeer)
	out := map[string]map[string]figRange{}
	for _, s := range r.Systems {
		m := map[string]figRange{}
		put := func(key string, v []float64) {
			if len(v) > 0 {
				med, lo, hi := spreadOf(v)
				m[key] = figRange{Median: med, Min: lo, Max: hi, Rounds: len(v)}
			}
		}
		for _, h := range headline {
			put(h.key, r.values(s, h.f))
		}
		put("end_to_end_vs_raw_list_loop", r.ratios(s, raw, rateIn(e2ePhase)))
		put("drain_vs_raw_list_loop", r.ratios(s, raw, rateIn(drainPhase)))
		put("end_to_end_vs_asynq", r.ratios(s, peer, rateIn(e2ePhase)))
		out[s.Name] = m
	}
	return out
}
