package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
	inversion "github.com/prioq/prioq/internal/inversions"
	"github.com/prioq/prioq/internal/redisfind"
)

// -cluster: sharded queues on Redis Clusters of 1, 3 and 6 primaries (local
// redis-server processes), beside the unsharded queue on the same kind of
// cluster, in one run. On this 2-core machine the primaries share the
// cores, so throughput cannot grow with them: what must hold is the Redis
// CPU a message costs summed over every primary, how evenly the primaries
// share it, the priority inversions, and the idle pickup.

// clusterRow is one setup's figures.
type clusterRow struct {
	Name       string   `json:"name"`
	Shards     int      `json:"shards"`
	Primaries  int      `json:"primaries"`
	Raw        bool     `json:"raw,omitempty"`         // the raw list loop, its lists under Shards tags
	Rate       float64  `json:"rate_per_s"`            // end to end, Run with 32 workers
	CPUPerMsg  float64  `json:"cpu_us_per_message"`    // Redis CPU summed over every primary
	Busiest    float64  `json:"busiest_primary_share"` // the busiest primary's share of that
	Inversions int      `json:"inversions"`            // deliveries of p while > p had been ready ≥ 10 ms
	Delivered  int      `json:"delivered"`
	DrainInv   int      `json:"drain_inversions"` // one consumer draining a preloaded queue
	PickupP50  float64  `json:"pickup_p50_ms"`
	PickupP99  float64  `json:"pickup_p99_ms"`
	Errors     []string `json:"errors,omitempty"`
}

func (r clusterRow) String() string {
	if r.Raw {
		return fmt.Sprintf("%-34s %8.0f msg/s  %5.1f us CPU/msg  busiest %4.0f%%", r.Name, r.Rate, r.CPUPerMsg, 100*r.Busiest)
	}
	rate := 0.0
	if r.Delivered > 0 {
		rate = 100 * float64(r.Inversions) / float64(r.Delivered)
	}
	return fmt.Sprintf("%-34s %8.0f msg/s  %5.1f us CPU/msg  busiest %4.0f%%  inversions %.3f%% (%d)  drain inversions %d  pickup p50 %.2f ms p99 %.2f ms",
		r.Name, r.Rate, r.CPUPerMsg, 100*r.Busiest, rate, r.Inversions, r.DrainInv, r.PickupP50, r.PickupP99)
}

// runClusterBench measures every setup in interleaved rounds (A B C … A B C …:
// one figure here swings ±30% between runs) and writes cluster.md to dir with
// each figure's median and range.
func runClusterBench(ctx context.Context, p params, dir string) {
	bin, err := exec.LookPath(redisfind.Binary())
	if err != nil {
		fatal(fmt.Errorf("-cluster starts its own redis-server processes: %w", err))
	}
	n, rounds := 20000, 3
	if p.Profile == "full" {
		n, rounds = 60000, 5
	}
	// Each prioq setup follows the raw list loop on the same cluster, with
	// its lists under as many hash tags: what spreading the same commands
	// over the primaries costs by itself on this machine.
	type setup struct {
		primaries, shards int
		raw               bool
	}
	var setups []setup
	for _, p := range []int{1, 3, 6} {
		setups = append(setups, setup{p, 1, true}, setup{p, 6, true}, setup{p, 1, false}, setup{p, 6, false})
	}
	byName := map[string][]clusterRow{}
	var names []string
	for r := 1; r <= rounds; r++ {
		for _, s := range setups {
			name := fmt.Sprintf("sharded shards=%d primaries=%d", s.shards, s.primaries)
			switch {
			case s.raw:
				name = fmt.Sprintf("raw list loop tags=%d primaries=%d", s.shards, s.primaries)
			case s.shards == 1:
				name = fmt.Sprintf("unsharded primaries=%d", s.primaries)
			}
			fmt.Fprintf(os.Stderr, "bench: round %d/%d: %s\n", r, rounds, name)
			row := clusterSetup(ctx, bin, name, s.primaries, s.shards, s.raw, n)
			fmt.Println(row)
			if r == 1 {
				names = append(names, name)
			}
			byName[name] = append(byName[name], row)
		}
	}
	md := clusterMarkdown(names, byName)
	fmt.Print(md)
	if dir == "" {
		dir = filepath.Join("results", time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(dir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "cluster.md"), []byte(md), 0o644)
		fmt.Fprintf(os.Stderr, "bench: results in %s\n", dir)
	}
}

func clusterMarkdown(names []string, byName map[string][]clusterRow) string {
	var b strings.Builder
	rounds := len(byName[names[0]])
	fmt.Fprintf(&b, "\nMedians of %d interleaved rounds (range in brackets). msg/s: end to end (prioq: Run, 32 workers; raw: 32 BLPOP consumers); CPU: Redis CPU per message summed over every primary, and its ratio to the same loop on one tag (prioq: the unsharded queue) on as many primaries; busiest: the busiest primary's share of it (budget 1.3/P); inversions: deliveries of p while a message of priority > p had been ready ≥ 10 ms.\n\n", rounds)
	b.WriteString("| setup | msg/s | Redis CPU µs/msg | vs one tag | busiest primary | inversion rate | one consumer draining: inversions | idle pickup p50 / p99 ms |\n|---|---|---|---|---|---|---|---|\n")
	cpuOf := func(name string) float64 {
		c, _, _ := spread(byName[name], func(r clusterRow) float64 { return r.CPUPerMsg })
		return c
	}
	for _, name := range names {
		rows := byName[name]
		first := rows[0]
		rate, rlo, rhi := spread(rows, func(r clusterRow) float64 { return r.Rate })
		cpu, clo, chi := spread(rows, func(r clusterRow) float64 { return r.CPUPerMsg })
		bus, _, bhi := spread(rows, func(r clusterRow) float64 { return r.Busiest })
		ratio := "—"
		if first.Shards > 1 {
			base := fmt.Sprintf("unsharded primaries=%d", first.Primaries)
			if first.Raw {
				base = fmt.Sprintf("raw list loop tags=1 primaries=%d", first.Primaries)
			}
			if _, ok := byName[base]; ok {
				ratio = fmt.Sprintf("%.2f×", cpu/cpuOf(base))
			}
		}
		fmt.Fprintf(&b, "| %s | %.0f [%.0f–%.0f] | %.1f [%.1f–%.1f] | %s | %.0f%% (max %.0f%%; budget %.0f%%) | ",
			name, rate, rlo, rhi, cpu, clo, chi, ratio, 100*bus, 100*bhi, 100*1.3/float64(first.Primaries))
		if first.Raw {
			b.WriteString("— | — | — |\n")
		} else {
			inv, _, ihi := spread(rows, func(r clusterRow) float64 {
				if r.Delivered == 0 {
					return 0
				}
				return 100 * float64(r.Inversions) / float64(r.Delivered)
			})
			drain, _, dhi := spread(rows, func(r clusterRow) float64 { return float64(r.DrainInv) })
			p50, _, _ := spread(rows, func(r clusterRow) float64 { return r.PickupP50 })
			p99, _, _ := spread(rows, func(r clusterRow) float64 { return r.PickupP99 })
			fmt.Fprintf(&b, "%.3f%% (max %.3f%%) | %.0f (max %.0f) | %.2f / %.2f |\n", inv, ihi, drain, dhi, p50, p99)
		}
		for _, r := range rows {
			for _, e := range r.Errors {
				fmt.Fprintf(&b, "\n%s: %s\n", name, e)
			}
		}
	}
	// What sharding costs beyond spreading the same commands: prioq's ratio
	// over the raw loop's, on as many primaries.
	b.WriteString("\nSharding's own cost (prioq's CPU ratio ÷ the raw loop's, same primaries):")
	for _, p := range []int{1, 3, 6} {
		rs, ru := fmt.Sprintf("raw list loop tags=6 primaries=%d", p), fmt.Sprintf("raw list loop tags=1 primaries=%d", p)
		ps, pu := fmt.Sprintf("sharded shards=6 primaries=%d", p), fmt.Sprintf("unsharded primaries=%d", p)
		if len(byName[rs]) > 0 && len(byName[ru]) > 0 && len(byName[ps]) > 0 && len(byName[pu]) > 0 {
			fmt.Fprintf(&b, " %d primaries %.2f×;", p, (cpuOf(ps)/cpuOf(pu))/(cpuOf(rs)/cpuOf(ru)))
		}
	}
	b.WriteString("\n")
	return b.String()
}

// startBenchCluster starts primaries primaries that split the slots evenly
// in order, and returns their addresses and a stop function.
func startBenchCluster(ctx context.Context, bin string, primaries int) ([]string, func(), error) {
	var srvs []*redisfind.Server
	stop := func() {
		for _, s := range srvs {
			s.Stop()
		}
	}
	var addrs []string
	for i := 0; i < primaries; i++ {
		s, err := redisfind.StartBinary(ctx, bin, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		if err != nil {
			stop()
			return nil, nil, err
		}
		srvs = append(srvs, s)
		addrs = append(addrs, s.Addr)
	}
	do := func(addr string, rcv any, args ...string) error {
		c, err := radix.Dial(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Do(ctx, radix.Cmd(rcv, args[0], args[1:]...))
	}
	for i, a := range addrs {
		lo, hi := i*16384/primaries, (i+1)*16384/primaries-1
		if err := do(a, nil, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			stop()
			return nil, nil, err
		}
	}
	for _, a := range addrs[1:] {
		_, port, _ := strings.Cut(a, ":")
		if err := do(addrs[0], nil, "CLUSTER", "MEET", "127.0.0.1", port); err != nil {
			stop()
			return nil, nil, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for ok := false; !ok; {
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("cluster of %d did not reach cluster_state:ok", primaries)
		}
		ok = true
		for _, a := range addrs {
			var info string
			if err := do(a, &info, "CLUSTER", "INFO"); err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addrs, stop, nil
}

// nodeCPU reads used_cpu_user + used_cpu_sys of each address, in µs (0 for
// one it cannot reach).
func nodeCPU(ctx context.Context, addrs []string) []float64 {
	out := make([]float64, len(addrs))
	for i, a := range addrs {
		c, err := radix.Dial(ctx, "tcp", a)
		if err != nil {
			continue
		}
		st, _ := readStats(ctx, c)
		c.Close()
		out[i] = st.cpu * 1e6
	}
	return out
}

// clusterSetup measures one setup on a fresh cluster: prioq's queue of
// shards shards, or the raw list loop over as many hash tags.
func clusterSetup(ctx context.Context, bin, name string, primaries, shards int, raw bool, n int) clusterRow {
	row := clusterRow{Name: name, Shards: shards, Primaries: primaries, Raw: raw}
	fail := func(err error) clusterRow { row.Errors = append(row.Errors, err.Error()); return row }
	addrs, stop, err := startBenchCluster(ctx, bin, primaries)
	if err != nil {
		return fail(err)
	}
	defer stop()
	cl, err := radix.ClusterConfig{PoolConfig: prioq.LazyPools(radix.PoolConfig{Size: 48, PingInterval: -1})}.New(ctx, addrs)
	if err != nil {
		return fail(err)
	}
	defer cl.Close()
	if raw {
		before := nodeCPU(ctx, addrs)
		took, err := clusterRawLoop(ctx, cl, shards, n)
		if err != nil {
			return fail(err)
		}
		row.cpu(before, nodeCPU(ctx, addrs), n, took)
		return row
	}
	q, err := prioq.Open(ctx, cl, "bench-cluster", prioq.Config{Layout: prioq.Levels(5), Shards: shards})
	if err != nil {
		return fail(err)
	}
	if inv, err := drainInversions(ctx, q, min(n, 20000)); err != nil {
		row.Errors = append(row.Errors, "drain: "+err.Error())
	} else {
		row.DrainInv = inv
	}
	before := nodeCPU(ctx, addrs)
	recs, took, err := clusterEndToEnd(ctx, q, n)
	if err != nil {
		row.Errors = append(row.Errors, "end to end: "+err.Error())
	}
	row.cpu(before, nodeCPU(ctx, addrs), len(recs), took)
	row.Delivered = len(recs)
	if len(recs) > 0 {
		row.Inversions = inversion.Count(recs, 10*time.Millisecond)
	}
	p50, p99, err := clusterPickup(ctx, q, 60)
	if err != nil {
		row.Errors = append(row.Errors, "pickup: "+err.Error())
	}
	row.PickupP50, row.PickupP99 = p50, p99
	return row
}

// cpu sets the rate, the CPU per message and the busiest primary's share
// from the primaries' CPU before and after n messages that took took.
func (r *clusterRow) cpu(before, after []float64, n int, took time.Duration) {
	var total, busiest float64
	for i := range after {
		d := after[i] - before[i]
		total += d
		busiest = max(busiest, d)
	}
	if n > 0 {
		r.Rate = float64(n) / took.Seconds()
		r.CPUPerMsg = total / float64(n)
	}
	if total > 0 {
		r.Busiest = busiest / total
	}
}

// clusterRawLoop is the raw list loop of the main run on a cluster, its
// lists spread over tags hash tags: 8 producers RPUSH each message to the
// next tag's list of its priority, 32 consumers BLPOP the 5 lists of one
// tag (consumer i serves tag i mod tags), highest first, until n are taken.
func clusterRawLoop(ctx context.Context, cl radix.MultiClient, tags, n int) (time.Duration, error) {
	lists := func(tag int) []string {
		var out []string
		for p := 4; p >= 0; p-- {
			out = append(out, fmt.Sprintf("{bench-raw-%d}:%d", tag, p))
		}
		return out
	}
	var taken atomic.Int64
	var end atomic.Int64 // when the last was taken, ns after start
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	start := time.Now()
	for ci := 0; ci < 32; ci++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := append(lists(ci%tags), "0.1")
			for taken.Load() < int64(n) {
				var got []string
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := cl.Do(cctx, radix.Cmd(&got, "BLPOP", args...))
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 2 && taken.Add(1) == int64(n) {
					end.Store(int64(time.Since(start)))
				}
			}
		}()
	}
	per := n / 8
	for pi := 0; pi < 8; pi++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := string(make([]byte, 64))
			for i := 0; i < per; i++ {
				k := pi*per + i
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := cl.Do(cctx, radix.Cmd(nil, "RPUSH", lists(k % tags)[k*7919%5], payload))
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Duration(end.Load())
	select {
	case err := <-errs:
		return took, err
	default:
		return took, nil
	}
}

// drainInversions preloads n messages of random priority and drains them
// with one consumer, 32 at a time, counting deliveries of a priority above
// the one before.
func drainInversions(ctx context.Context, q *prioq.Queue, n int) (int, error) {
	items := make([]prioq.EnqueueItem, 0, 500)
	for i := 0; i < n; i++ {
		items = append(items, prioq.EnqueueItem{Payload: []byte("x"), Options: []prioq.Option{prioq.Priority(int64(i*7919) % 5)}})
		if len(items) == cap(items) || i == n-1 {
			if _, err := q.EnqueueBatch(ctx, items); err != nil {
				return 0, err
			}
			items = items[:0]
		}
	}
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	if err != nil {
		return 0, err
	}
	defer func() {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = cons.Close(c)
		cancel()
	}()
	last, inv := int64(math.MaxInt64), 0
	for got := 0; got < n; {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		msgs, err := cons.ReceiveBatch(rctx, 32)
		cancel()
		if err != nil {
			return inv, err
		}
		for _, m := range msgs {
			if m.Priority > last {
				inv++
			}
			last = m.Priority
			got++
		}
		for _, err := range prioq.AckBatch(ctx, msgs...) {
			if err != nil {
				return inv, err
			}
		}
	}
	return inv, nil
}

// clusterEndToEnd runs 8 producers and a consumer with Run and 32 workers
// until n messages are handled, and records each delivery.
func clusterEndToEnd(ctx context.Context, q *prioq.Queue, n int) ([]inversion.Delivery, time.Duration, error) {
	base := time.Now()
	var mu sync.Mutex
	recs := make([]inversion.Delivery, 0, n)
	done := make(chan struct{})
	const lease = 30 * time.Second
	cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 32, Lease: lease})
	if err != nil {
		return nil, 0, err
	}
	rctx, stop := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = cons.Run(rctx, func(_ context.Context, m *prioq.Message) error {
			t := m.LeaseDeadline().Add(-lease)
			ready := base.Add(time.Duration(binary.BigEndian.Uint64(m.Payload)))
			mu.Lock()
			recs = append(recs, inversion.Delivery{Prio: m.Priority, Ready: ready, Taken: t})
			if len(recs) == n {
				close(done)
			}
			mu.Unlock()
			return nil
		})
	}()
	start := time.Now()
	var pwg sync.WaitGroup
	per := n / 8
	var perr error
	var perrOnce sync.Once
	for pi := 0; pi < 8; pi++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := 0; i < per; i++ {
				payload := make([]byte, 64)
				binary.BigEndian.PutUint64(payload, uint64(time.Since(base)))
				if _, err := q.Enqueue(ctx, payload, prioq.Priority(int64((pi*per+i)*7919%5))); err != nil {
					perrOnce.Do(func() { perr = err })
					return
				}
			}
		}()
	}
	pwg.Wait()
	var err2 error
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		err2 = fmt.Errorf("handled %d of %d in 2 minutes", len(recs), n)
	}
	took := time.Since(start)
	stop()
	<-runDone
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = cons.Close(c)
	cancel()
	if perr != nil {
		return recs, took, perr
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(recs), took, err2
}

// clusterPickup measures enqueue → handler start for single messages sent
// to an idle consumer, each with another ordering key, so they land on
// every shard in turn.
func clusterPickup(ctx context.Context, q *prioq.Queue, samples int) (p50, p99 float64, err error) {
	got := make(chan time.Time, 1)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		return 0, 0, err
	}
	rctx, stop := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = cons.Run(rctx, func(context.Context, *prioq.Message) error { got <- time.Now(); return nil })
	}()
	defer func() {
		stop()
		<-runDone
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = cons.Close(c)
		cancel()
	}()
	var lat []float64
	for i := 0; i < samples; i++ {
		time.Sleep(20 * time.Millisecond) // idle: the consumer is waiting
		start := time.Now()
		if _, err := q.Enqueue(ctx, []byte("x"), prioq.OrderingKey(strconv.Itoa(i))); err != nil {
			return 0, 0, err
		}
		select {
		case t := <-got:
			lat = append(lat, float64(t.Sub(start).Microseconds())/1000)
		case <-time.After(5 * time.Second):
			return 0, 0, fmt.Errorf("sample %d not picked up in 5 s", i)
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}
