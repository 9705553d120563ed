package prioq

import (
	"context"
	"encoding/binary"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/consume"
	inversion "github.com/prioq/prioq/internal/inversions"
)

// Per-operation costs on one client, side by side with the raw commands they
// replace. Whole-system numbers (concurrency, latency, CPU) are in bench/.

var benchPayload = make([]byte, 64)

func BenchmarkEnqueue(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  Config
		opts []Option
	}{
		{"Levels/AtLeastOnce", Config{Layout: Levels(3)}, []Option{Priority(1)}},
		{"Levels/AtMostOnce", Config{Layout: Levels(3), Mode: AtMostOnce}, []Option{Priority(1)}},
		{"Range/AtLeastOnce", Config{Layout: Range(-1000, 1000, 16)}, []Option{Priority(1)}},
		{"Levels/CallerID", Config{Layout: Levels(3)}, nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			q := openQueue(b, c, tc.cfg)
			defer q.Purge(ctx)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				opts := tc.opts
				if opts == nil {
					opts = []Option{ID("id-" + fmtInt(int64(i)))}
				}
				if _, err := q.Enqueue(ctx, benchPayload, opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("raw RPUSH", func(b *testing.B) {
		key := "prioq-bench:" + queueName(b)
		defer c.Do(ctx, radix.Cmd(nil, "DEL", key))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := c.Do(ctx, radix.Cmd(nil, "RPUSH", key, string(benchPayload))); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEnqueueBatch100(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	q := openQueue(b, c, Config{Layout: Levels(3)})
	defer q.Purge(ctx)
	items := make([]EnqueueItem, 100)
	for i := range items {
		items[i] = EnqueueItem{Payload: benchPayload, Options: []Option{Priority(int64(i % 3))}}
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := q.EnqueueBatch(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/msg")
}

// BenchmarkReceive takes from a filled queue: Receive (+ Ack for AtLeastOnce).
func BenchmarkReceive(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	for _, m := range bothModes {
		b.Run(m.name, func(b *testing.B) {
			q := openQueue(b, c, Config{Mode: m.mode})
			defer q.Purge(ctx)
			fillQueue(b, q, b.N)
			cons, err := q.NewConsumer(ConsumerConfig{NoPromoter: true})
			if err != nil {
				b.Fatal(err)
			}
			defer cons.Close(ctx)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				msg, err := cons.Receive(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if m.mode == AtLeastOnce {
					if err := msg.Ack(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
	b.Run("raw BLPOP", func(b *testing.B) {
		q := openQueue(b, c, Config{Mode: AtMostOnce})
		defer q.Purge(ctx)
		fillQueue(b, q, b.N)
		keys := append(sh(q).Keys().HighFirst(), "1") // highFirst has cap == len: this copies
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			var r [][]byte
			if err := c.Do(ctx, radix.Cmd(&r, "BLPOP", keys...)); err != nil || len(r) != 2 {
				b.Fatal(err, len(r))
			}
		}
	})
}

func fillQueue(b *testing.B, q *Queue, n int) {
	ctx := context.Background()
	for n > 0 {
		k := min(n, 500)
		items := make([]EnqueueItem, k)
		for i := range items {
			items[i] = EnqueueItem{Payload: benchPayload, Options: []Option{Priority(int64(i % 3))}}
		}
		if _, err := q.EnqueueBatch(ctx, items); err != nil {
			b.Fatal(err)
		}
		n -= k
	}
}

// BenchmarkTakeLargeMessage measures the Redis server time of a take of one
// 16 MiB message (INFO commandstats) beside an LPOP of the same bytes, and
// reports their ratio: what leasing adds to moving the bytes out. (A take
// that rewrote the envelope copied the message three times inside Redis.)
func BenchmarkTakeLargeMessage(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	big := make([]byte, 16<<20)
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	serverUs := func(cmd string) float64 {
		var info string
		if err := c.Do(ctx, radix.Cmd(&info, "INFO", "commandstats")); err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":"); ok {
				for _, f := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(f, "usec="); ok {
						n, _ := strconv.ParseFloat(v, 64)
						return n
					}
				}
			}
		}
		return 0
	}
	q := openQueue(b, c, Config{Layout: Levels(1), MaxPayload: len(big)})
	defer q.Purge(ctx)
	key := "prioq-bench:" + queueName(b)
	defer c.Do(ctx, radix.Cmd(nil, "DEL", key))
	// The floor of any take that is a script returning the message: the pop
	// hands the bytes to Lua, the reply copies them out.
	popScript := radix.NewEvalScript("return redis.call('LPOP', KEYS[1])")
	var takeUs, popUs, floorUs float64
	for i := 0; i < b.N; i++ {
		if err := c.Do(ctx, radix.Cmd(nil, "RPUSH", key, string(big))); err != nil {
			b.Fatal(err)
		}
		before := serverUs("evalsha")
		if err := c.Do(ctx, popScript.Cmd(nil, []string{key})); err != nil {
			b.Fatal(err)
		}
		floorUs += serverUs("evalsha") - before
		if _, err := q.Enqueue(ctx, big); err != nil {
			b.Fatal(err)
		}
		if err := c.Do(ctx, radix.Cmd(nil, "RPUSH", key, string(big))); err != nil {
			b.Fatal(err)
		}
		before = serverUs("evalsha") + serverUs("fcall") // take.lua is a function (internal/store/funcs.go)
		msgs, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
		if err != nil || len(msgs) != 1 {
			b.Fatal(err, len(msgs))
		}
		takeUs += serverUs("evalsha") + serverUs("fcall") - before
		if err := msgs[0].Ack(ctx); err != nil {
			b.Fatal(err)
		}
		before = serverUs("lpop")
		if err := c.Do(ctx, radix.Cmd(nil, "LPOP", key)); err != nil {
			b.Fatal(err)
		}
		popUs += serverUs("lpop") - before
	}
	b.ReportMetric(takeUs/float64(b.N), "take-server-µs")
	b.ReportMetric(popUs/float64(b.N), "lpop-server-µs")
	b.ReportMetric(takeUs/popUs, "take/lpop")
	b.ReportMetric(floorUs/popUs, "pop-script/lpop")
}

// BenchmarkFanInInversions measures the priority inversions of consumers of
// a queue of 6 shards under mixed load: 4 producers enqueue as fast as they
// can, priorities 0-3 and a rare 4 (1 in 20); 2 consumers (Run, 16 workers
// each, 3 ms per message) fall behind, so a backlog builds. An inversion is
// a delivery of p taken while a message of priority > p had been ready on
// any shard for 10 ms or more. Each round runs the fan-in's hints
// (fetchFanIn) and then the published baseline, the MultiQueue's two-choice
// pop (fetchTwoChoice), on the same Redis, so the two are interleaved:
//
//	go test -run XXX -bench FanInInversions -benchtime 3x .
func BenchmarkFanInInversions(b *testing.B) {
	c := newClient(b)
	policies := []string{"hints", "two-choice"}
	inv, delivered := make([]int, 2), make([]int, 2)
	for i := 0; i < b.N; i++ {
		for p, policy := range policies {
			q := openQueue(b, c, Config{Layout: Levels(5), Shards: 6})
			recs := fanInLoad(b, q, 4000, policy == "two-choice")
			inv[p] += inversion.Count(recs, 10*time.Millisecond)
			delivered[p] += len(recs)
			_, _ = q.Purge(context.Background())
		}
	}
	for p, policy := range policies {
		b.ReportMetric(100*float64(inv[p])/float64(delivered[p]), policy+"-inversion-%")
	}
}

// fanInLoad runs n messages through q as BenchmarkFanInInversions says and
// returns each delivery.
func fanInLoad(b *testing.B, q *Queue, n int, twoChoice bool) []inversion.Delivery {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const lease = time.Minute
	base := time.Now()
	var mu sync.Mutex
	recs := make([]inversion.Delivery, 0, n)
	all := make(chan struct{})
	var conss []*Consumer
	var wg sync.WaitGroup
	for range 2 {
		cons, err := q.NewConsumer(ConsumerConfig{Concurrency: 16, Lease: lease})
		if err != nil {
			b.Fatal(err)
		}
		cons.fetcher.Source().(*consume.FanIn).TwoChoice = twoChoice
		conss = append(conss, cons)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cons.Run(ctx, func(_ context.Context, m *Message) error {
				time.Sleep(3 * time.Millisecond)
				ready := base.Add(time.Duration(binary.BigEndian.Uint64(m.Payload)))
				mu.Lock()
				defer mu.Unlock()
				recs = append(recs, inversion.Delivery{Prio: m.Priority, Ready: ready, Taken: m.LeaseDeadline().Add(-lease)})
				if len(recs) == n {
					close(all)
				}
				return nil
			})
		}()
	}
	var pwg sync.WaitGroup
	for p := range 4 {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			r := mrand.New(mrand.NewPCG(uint64(p), 7))
			for range n / 4 {
				payload := make([]byte, 64)
				binary.BigEndian.PutUint64(payload, uint64(time.Since(base)))
				prio := r.Int64N(4)
				if r.IntN(20) == 0 {
					prio = 4
				}
				if _, err := q.Enqueue(ctx, payload, Priority(prio)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	pwg.Wait()
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatalf("delivered %d of %d", len(recs), n)
	}
	cancel()
	wg.Wait()
	for _, c := range conss {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = c.Close(cctx)
		ccancel()
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(recs)
}

// BenchmarkPickupFloor measures, on an idle queue, how long a message takes
// from its producer's call to the consumer's hands, three ways in turn: the
// raw loop's shape (BLPOP woken by an RPUSH: one round trip after the
// push), the shape every wake-then-take consumer has (BZPOPMIN on a wake-up
// set, then a Lua call that pops: two round trips after the push, the
// least a lease recorded by a script can cost), and prioq's AtLeastOnce
// Receive. It reports each one's median (µs) and the ratios to the raw
// shape: the second ratio is the floor of the first for any design that
// wakes and then takes with a script.
func BenchmarkPickupFloor(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	conn, err := radix.Dial(ctx, "tcp", testAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	q := openQueue(b, c, Config{})
	defer q.Purge(ctx)
	cons := newConsumer(b, q, ConsumerConfig{NoPromoter: true})
	list, wake := "prioq-bench:floor:"+queueName(b), "prioq-bench:floorwake:"+queueName(b)
	defer c.Do(ctx, radix.Cmd(nil, "DEL", list, wake))
	popScript := radix.NewEvalScript("return redis.call('LPOP', KEYS[1])")
	var raw, script, prioq []float64
	timed := func(wait func() error, push func() error) float64 {
		done := make(chan time.Time, 1)
		go func() {
			if err := wait(); err != nil {
				b.Error(err)
			}
			done <- time.Now()
		}()
		time.Sleep(2 * time.Millisecond) // the consumer is blocked by now
		start := time.Now()
		if err := push(); err != nil {
			b.Fatal(err)
		}
		return float64((<-done).Sub(start).Microseconds())
	}
	for i := 0; i < b.N; i++ {
		raw = append(raw, timed(func() error {
			return conn.Do(ctx, radix.Cmd(nil, "BLPOP", list, "5"))
		}, func() error { return c.Do(ctx, radix.Cmd(nil, "RPUSH", list, "x")) }))
		script = append(script, timed(func() error {
			if err := conn.Do(ctx, radix.Cmd(nil, "BZPOPMIN", wake, "5")); err != nil {
				return err
			}
			return conn.Do(ctx, popScript.Cmd(nil, []string{list}))
		}, func() error {
			p := radix.NewPipeline()
			p.Append(radix.Cmd(nil, "RPUSH", list, "x"))
			p.Append(radix.Cmd(nil, "ZADD", wake, "0", "w"))
			return c.Do(ctx, p)
		}))
		var m *Message
		prioq = append(prioq, timed(func() (err error) {
			m, err = cons.Receive(ctx)
			return err
		}, func() error { _, err := q.Enqueue(ctx, benchPayload); return err }))
		if m != nil {
			if err := m.Ack(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	r, s, p := med(raw), med(script), med(prioq)
	b.ReportMetric(r, "raw-p50-µs")
	b.ReportMetric(s, "wake+script-p50-µs")
	b.ReportMetric(p, "prioq-p50-µs")
	b.ReportMetric(s/r, "floor×raw")
	b.ReportMetric(p/r, "prioq×raw")
}
