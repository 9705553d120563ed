package prioq

import (
	"context"
	"testing"

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
		keys := append(q.k.highFirst, "1") // highFirst has cap == len: this copies
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
