package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// Scale curves: how the cost of one enqueue and one take (AtLeastOnce) grows
// with queue depth, lanes and segments, and end-to-end throughput with the
// number of consumers. Costs are server-side microseconds per operation from
// INFO commandstats, which the loopback round trip does not blur; a script's
// or a transaction's inner commands count twice there (on their own lines
// and inside the EVALSHA or EXEC). Beside them, the Redis process's CPU from
// INFO cpu (round trips included, counted once), and the wall time one
// client sees.

type costPoint struct {
	X            int     `json:"x"`
	EnqueueSrvUs float64 `json:"enqueue_server_us"`
	TakeSrvUs    float64 `json:"take_server_us"`
	EnqueueUs    float64 `json:"enqueue_wall_us"`
	TakeUs       float64 `json:"take_wall_us"`
	EnqueueCPUUs float64 `json:"enqueue_cpu_us,omitempty"`
	TakeCPUUs    float64 `json:"take_cpu_us,omitempty"`
}

type consPoint struct {
	Consumers int     `json:"consumers"`
	Prioq     float64 `json:"prioq_reliable_per_s"`
	Raw       float64 `json:"raw_list_loop_per_s"`
}

type scaleResult struct {
	DepthLevels []costPoint `json:"depth_levels"`
	DepthRange  []costPoint `json:"depth_range"`
	// Range with 1,000 priorities repeating, and RangeSorted with every
	// priority its own (as DepthRange): the two forms' best cases.
	DepthRangeRepeat []costPoint `json:"depth_range_1000_priorities,omitempty"`
	DepthRangeSorted []costPoint `json:"depth_range_sorted,omitempty"`
	Lanes            []costPoint `json:"lanes"`
	LanesTop         []costPoint `json:"lanes_work_in_top_lane"`
	Segments         []costPoint `json:"segments"`
	Consumers        []consPoint `json:"consumers"`
	// LaneCompare is the 2 → 64 lanes take cost measured in alternating
	// rounds: the curves above measure each point once, and on a noisy
	// machine one point moves ±25%.
	LaneCompare *laneCompare `json:"lane_compare,omitempty"`
}

// laneCompare holds the take cost (server µs) of Levels(2) and Levels(64)
// queues, with the work in the lowest lane (every empty lane is passed
// first) and in the top lane, one figure per round, over Rounds alternating
// rounds.
type laneCompare struct {
	Rounds   int       `json:"rounds"`
	Lowest2  []float64 `json:"rounds_lowest_2_us"`
	Lowest64 []float64 `json:"rounds_lowest_64_us"`
	Top2     []float64 `json:"rounds_top_2_us"`
	Top64    []float64 `json:"rounds_top_64_us"`
	// Range: 2 and 64 segments, the work in the lowest.
	Segments2  []float64 `json:"rounds_segments_2_us,omitempty"`
	Segments64 []float64 `json:"rounds_segments_64_us,omitempty"`
}

// laneCase is one side of the comparison: its rounds at 2 and at 64 lanes.
type laneCase struct {
	what           string
	two, sixtyFour []float64
}

// cases are the two comparisons, worst case first.
func (lc *laneCompare) cases() []laneCase {
	cs := []laneCase{{"work only in the lowest lane (worst case)", lc.Lowest2, lc.Lowest64},
		{"work in the top lane", lc.Top2, lc.Top64}}
	if len(lc.Segments2) > 0 {
		cs = append(cs, laneCase{"Range segments, work only in the lowest", lc.Segments2, lc.Segments64})
	}
	return cs
}

// String is the comparison's line: medians, their ratio and every round.
func (c laneCase) String() string {
	a, b := median(c.two), median(c.sixtyFour)
	return fmt.Sprintf("%.1f → %.1f µs server (%.2f×; rounds %s → %s)", a, b, b/a, fmtList(c.two), fmtList(c.sixtyFour))
}

// ratio is the median at 64 lanes over the median at 2.
func (c laneCase) ratio() float64 { return median(c.sixtyFour) / median(c.two) }

// compareLanes measures laneCompare: in each round the six cases run in an
// order that alternates between rounds, so a drift of the machine's speed
// does not favour one side.
func compareLanes(ctx context.Context, c radix.Client, rounds, ops int) (*laneCompare, error) {
	r := &laneCompare{Rounds: rounds}
	type kase struct {
		lanes         int
		top, segments bool
		into          *[]float64
	}
	cases := []kase{{2, false, false, &r.Lowest2}, {64, false, false, &r.Lowest64}, {2, true, false, &r.Top2}, {64, true, false, &r.Top64},
		{2, false, true, &r.Segments2}, {64, false, true, &r.Segments64}}
	for i := 0; i < rounds; i++ {
		order := slices.Clone(cases)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, k := range order {
			prio := int64(0)
			if k.top {
				prio = int64(k.lanes - 1)
			}
			layout := prioq.Levels(k.lanes)
			if k.segments {
				layout = prioq.Range(0, 1<<40, k.lanes)
			}
			pt, err := measureCost(ctx, c, prioq.Config{Layout: layout}, 1000, ops, func() int64 { return prio })
			if err != nil {
				return nil, err
			}
			*k.into = append(*k.into, pt.TakeSrvUs)
		}
	}
	return r, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// serverUsec is the server time spent in all commands so far (INFO
// commandstats, minus INFO itself), in microseconds. A script's inner
// commands count twice: inside its EVALSHA and on their own lines (so do an
// EXEC's): compare like with like, or use the CPU figures.
func serverUsec(ctx context.Context, c radix.Client) float64 {
	var info string
	if err := c.Do(ctx, radix.Cmd(&info, "INFO", "commandstats")); err != nil {
		return 0
	}
	var usec float64
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if k == "usec" {
				f, _ := strconv.ParseFloat(v, 64)
				usec += f
			}
		}
	}
	return usec
}

// measureCost fills a fresh queue to depth (priorities from prio), then times
// ops enqueues and ops takes (+acks, not counted) at that depth.
func measureCost(ctx context.Context, c radix.Client, cfg prioq.Config, depth, ops int, prio func() int64) (costPoint, error) {
	name := fmt.Sprintf("bench-scale-%d", time.Now().UnixNano())
	q, err := prioq.Open(ctx, c, name, cfg)
	if err != nil {
		return costPoint{}, err
	}
	defer cleanupQueue(ctx, c, q)
	payload := makePayload(0, 0)
	for filled := 0; filled < depth; {
		n := min(1000, depth-filled)
		items := make([]prioq.EnqueueItem, n)
		for i := range items {
			items[i] = prioq.EnqueueItem{Payload: payload, Options: []prioq.Option{prioq.Priority(prio())}}
		}
		if _, err := q.EnqueueBatch(ctx, items); err != nil {
			return costPoint{}, err
		}
		filled += n
	}
	var pt costPoint
	cpu := func() float64 { s, _ := readStats(ctx, c); return s.cpu * 1e6 }
	c0 := cpu()
	u0 := serverUsec(ctx, c)
	start := time.Now()
	for i := 0; i < ops; i++ {
		if _, err := q.Enqueue(ctx, payload, prioq.Priority(prio())); err != nil {
			return costPoint{}, err
		}
	}
	pt.EnqueueUs = float64(time.Since(start).Microseconds()) / float64(ops)
	u1 := serverUsec(ctx, c)
	pt.EnqueueSrvUs = (u1 - u0) / float64(ops)
	pt.EnqueueCPUUs = (cpu() - c0) / float64(ops)

	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	if err != nil {
		return costPoint{}, err
	}
	defer cons.Close(ctx)
	msgs := make([]*prioq.Message, 0, ops)
	c0 = cpu()
	u0 = serverUsec(ctx, c)
	start = time.Now()
	for i := 0; i < ops; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			return costPoint{}, err
		}
		msgs = append(msgs, m)
	}
	pt.TakeUs = float64(time.Since(start).Microseconds()) / float64(ops)
	u1 = serverUsec(ctx, c)
	pt.TakeSrvUs = (u1 - u0) / float64(ops)
	pt.TakeCPUUs = (cpu() - c0) / float64(ops)
	for len(msgs) > 0 {
		n := min(256, len(msgs))
		prioq.AckBatch(ctx, msgs[:n]...)
		msgs = msgs[n:]
	}
	return pt, nil
}

func cleanupQueue(ctx context.Context, c radix.Client, q *prioq.Queue) {
	var keys []string
	_ = c.Do(ctx, radix.Cmd(&keys, "KEYS", "prioq:{"+q.Name()+"}:*"))
	for _, k := range keys {
		_ = c.Do(ctx, radix.Cmd(nil, "UNLINK", k))
	}
}

func runScale(ctx context.Context, c radix.Client, p params) *scaleResult {
	r := &scaleResult{}
	depths := []int{1000, 10000, 100000, 1000000}
	lanes := []int{1, 2, 4, 8, 16, 32, 64}
	consumers := []int{1, 2, 4, 8, 16, 32, 64}
	ops, n := 2000, 10000
	if p.Quick {
		depths, lanes, consumers, ops, n = []int{1000, 10000}, []int{1, 64}, []int{1, 32}, 300, 1500
	}
	warn := func(what string, err error) {
		if err != nil {
			fmt.Printf("scale %s: %v\n", what, err)
		}
	}
	distinct := func() int64 { return rand.Int64N(1<<41) - 1<<40 }
	curves := []struct {
		what string
		cfg  prioq.Config
		prio func() int64
		out  *[]costPoint
	}{
		{"depth levels", prioq.Config{Layout: prioq.Levels(levels)}, func() int64 { return rand.Int64N(levels) }, &r.DepthLevels},
		{"depth range", prioq.Config{Layout: prioq.Range(-1<<40, 1<<40, 16)}, distinct, &r.DepthRange},
		{"depth range, 1000 priorities", prioq.Config{Layout: prioq.Range(-1<<40, 1<<40, 16)},
			func() int64 { return (rand.Int64N(1000) - 500) << 30 }, &r.DepthRangeRepeat},
		{"depth range sorted", prioq.Config{Layout: prioq.RangeSorted(-1<<40, 1<<40, 16)}, distinct, &r.DepthRangeSorted},
	}
	for _, d := range depths {
		for _, cv := range curves {
			pt, err := measureCost(ctx, c, cv.cfg, d, ops, cv.prio)
			warn(cv.what, err)
			pt.X = d
			*cv.out = append(*cv.out, pt)
		}
	}
	for _, l := range lanes {
		// Everything in the lowest lane: the take passes every empty lane first.
		pt, err := measureCost(ctx, c, prioq.Config{Layout: prioq.Levels(l)}, 1000, ops, func() int64 { return 0 })
		warn("lanes", err)
		pt.X = l
		r.Lanes = append(r.Lanes, pt)
		top := int64(l - 1)
		pt, err = measureCost(ctx, c, prioq.Config{Layout: prioq.Levels(l)}, 1000, ops, func() int64 { return top })
		warn("lanes, top", err)
		pt.X = l
		r.LanesTop = append(r.LanesTop, pt)
		pt, err = measureCost(ctx, c, prioq.Config{Layout: prioq.Range(0, 1<<40, l)}, 1000, ops, func() int64 { return 0 })
		warn("segments", err)
		pt.X = l
		r.Segments = append(r.Segments, pt)
	}
	rounds := 5
	if p.Quick {
		rounds = 1
	}
	lc, err := compareLanes(ctx, c, rounds, ops)
	warn("lanes compared", err)
	r.LaneCompare = lc
	for _, k := range consumers {
		pq := newPrioq(c, false, prioq.AtLeastOnce)
		a, err := endToEnd(ctx, c, pq, n, p.Producers, 1, k, 1, time.Minute)
		warn("consumers prioq", err)
		b, err := endToEnd(ctx, c, newRawLists(c), n, p.Producers, 1, k, 1, time.Minute)
		warn("consumers raw", err)
		r.Consumers = append(r.Consumers, consPoint{Consumers: k, Prioq: a.Rate, Raw: b.Rate})
	}
	return r
}
