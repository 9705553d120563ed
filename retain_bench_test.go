package prioq

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkAckRetainCost measures the ack path, in the same rounds,
// interleaved: the store's plain ack alone (the path before results and
// retention existed: the coalesced pipeline), Message.Ack on a queue without
// Retain (the same pipeline behind the new checks), Message.Ack on a queue
// with Retain (finish.lua), and with a 100-byte result. It reports each
// one's median (µs per ack, acks one at a time; the ways take turns going
// first in a round) and the ratios to the first.
//
//	go test -run XXX -bench AckRetainCost -benchtime 20x .
func BenchmarkAckRetainCost(b *testing.B) {
	ctx := context.Background()
	c := newClient(b)
	plain := openQueue(b, c, Config{})
	kept, err := Open(ctx, c, plain.Name()+"-kept", Config{Retain: Retention{Max: 1000, For: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Purge(ctx)
	defer kept.Purge(ctx)
	const per = 200
	result := make([]byte, 100)
	ways := []struct {
		name string
		q    *Queue
		ack  func(m *Message) error
	}{
		{"store", plain, func(m *Message) error { return m.d.Shard().Ack(ctx, m.d.Req()) }},
		{"plain", plain, func(m *Message) error { return m.Ack(ctx) }},
		{"retain", kept, func(m *Message) error { return m.Ack(ctx) }},
		{"result", plain, func(m *Message) error { _ = m.SetResult(result); return m.Ack(ctx) }},
	}
	meds := make([][]float64, len(ways))
	for round := range b.N {
		for k := range ways {
			i := (k + round) % len(ways) // each way first in turn: no order effect
			w := ways[i]
			items := make([]EnqueueItem, per)
			for j := range items {
				items[j] = EnqueueItem{Payload: result}
			}
			if _, err := w.q.EnqueueBatch(ctx, items); err != nil {
				b.Fatal(err)
			}
			cons, err := w.q.NewConsumer(ConsumerConfig{Lease: time.Minute, BlockTimeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			msgs, err := cons.ReceiveBatch(ctx, per)
			if err != nil || len(msgs) != per {
				b.Fatal(len(msgs), err)
			}
			var each []float64
			for _, m := range msgs {
				start := time.Now()
				if err := w.ack(m); err != nil {
					b.Fatal(err)
				}
				each = append(each, float64(time.Since(start).Nanoseconds())/1e3)
			}
			_ = cons.Close(ctx)
			meds[i] = append(meds[i], median(each))
		}
	}
	base := median(meds[0])
	for i, w := range ways {
		m := median(meds[i])
		b.ReportMetric(m, w.name+"-µs/ack")
		if i > 0 {
			b.ReportMetric(m/base, w.name+"/store")
		}
	}
}

// BenchmarkWaitResultLatency measures how long after an ack's return
// WaitResult returns the result, one waiter blocked before the ack; the
// median in µs.
//
//	go test -run XXX -bench WaitResultLatency -benchtime 200x .
func BenchmarkWaitResultLatency(b *testing.B) {
	ctx := context.Background()
	c := newClient(b)
	q := openQueue(b, c, Config{})
	defer q.Purge(ctx)
	cons, err := q.NewConsumer(ConsumerConfig{Lease: time.Minute, BlockTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close(ctx)
	var lat []float64
	for range b.N {
		id, err := q.Enqueue(ctx, []byte("x"))
		if err != nil {
			b.Fatal(err)
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			if _, err := q.WaitResult(ctx, id); err != nil {
				b.Error(err)
			}
			got <- time.Now()
		}()
		time.Sleep(5 * time.Millisecond) // the waiter is blocked by then
		_ = m.SetResult([]byte("r"))
		if err := m.Ack(ctx); err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		lat = append(lat, float64((<-got).Sub(acked).Microseconds()))
	}
	b.ReportMetric(median(lat), "µs-after-ack(median)")
	b.ReportMetric(slices.Max(lat), "µs-after-ack(max)")
}

// median is the middle of xs (sorted in place).
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
