package prioq

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
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
		keys := append(sh(q).k.highFirst, "1") // highFirst has cap == len: this copies
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
	var takeUs, popUs float64
	for i := 0; i < b.N; i++ {
		if _, err := q.Enqueue(ctx, big); err != nil {
			b.Fatal(err)
		}
		if err := c.Do(ctx, radix.Cmd(nil, "RPUSH", key, string(big))); err != nil {
			b.Fatal(err)
		}
		before := serverUs("evalsha")
		msgs, _, err := sh(q).take(ctx, sh(q).k.highFirst, 1, time.Minute)
		if err != nil || len(msgs) != 1 {
			b.Fatal(err, len(msgs))
		}
		takeUs += serverUs("evalsha") - before
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
}
