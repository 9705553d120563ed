package store

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// BenchmarkPromoteWithoutSchedules measures what schedules cost a queue
// that has none: promote.lua as it is (it reads sdue's head) against the
// same script without that read, in interleaved rounds on one Redis, for an
// idle promotion (nothing due: the promoter's wake-up at a PromoteWait) and
// one that moves 100 due messages. It reports each median (µs per call)
// and the ratio schedules/reference, which should be 1 within noise.
func BenchmarkPromoteWithoutSchedules(b *testing.B) {
	const read = "local shead = redis.pcall('ZRANGE', queue_key(KEYS[6], S_DUE), 0, 0, 'WITHSCORES')"
	if !strings.Contains(promoteSrc, read) {
		b.Fatal("promote.lua no longer reads sdue as this benchmark expects")
	}
	ref := newFenced("promote_ref", strings.Replace(promoteSrc, read, "local shead = {}", 1), false)
	s := schedShard(b)
	ctx := context.Background()
	defer s.c.Do(ctx, radix.Cmd(nil, "DEL", s.k.all()...))
	call := func(sc script) time.Duration {
		start := time.Now()
		var res []int64
		if err := s.do(ctx, s.eval(sc, &res, s.k.promoteKeys, "", "256", s.armFlag(), s.kind())); err != nil || len(res) != 4 {
			b.Fatal(err, res)
		}
		return time.Since(start)
	}
	fill := func() {
		items := make([]Item, 100)
		for i := range items {
			e := Envelope{ID: "x", Payload: []byte("p")}
			items[i] = Item{ID: GeneratedID(time.Now(), 0, 1), Due: DueIn(time.Millisecond), Env: e.Encode()}
		}
		if _, err := s.Send(ctx, items); err != nil {
			b.Fatal(err)
		}
		time.Sleep(3 * time.Millisecond)
		if err := s.c.Do(ctx, radix.Cmd(nil, "DEL", s.k.lanes[0])); err != nil {
			b.Fatal(err)
		}
	}
	var idleNew, idleRef, moveNew, moveRef []float64
	us := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }
	for i := 0; i < b.N; i++ {
		for _, sc := range []struct {
			s    script
			idle *[]float64
			move *[]float64
		}{{promoteScript, &idleNew, &moveNew}, {ref, &idleRef, &moveRef}} {
			var d time.Duration
			for range 200 {
				d += call(sc.s)
			}
			*sc.idle = append(*sc.idle, us(d, 200))
			d = 0
			for range 5 {
				fill()
				d += call(sc.s)
			}
			*sc.move = append(*sc.move, us(d, 5))
		}
	}
	med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(med(idleNew), "idle-µs")
	b.ReportMetric(med(idleRef), "idle-ref-µs")
	b.ReportMetric(med(idleNew)/med(idleRef), "idle×ref")
	b.ReportMetric(med(moveNew), "move100-µs")
	b.ReportMetric(med(moveRef), "move100-ref-µs")
	b.ReportMetric(med(moveNew)/med(moveRef), "move100×ref")
}
