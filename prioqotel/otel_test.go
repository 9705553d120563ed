package prioqotel

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/testkit"
)

var client radix.Client

func TestMain(m *testing.M) {
	os.Exit(testkit.RunWithRedis(m, 16, func(_ string, c radix.Client) { client = c }))
}

type fixture struct {
	spans   *tracetest.SpanRecorder
	reader  *sdkmetric.ManualReader
	inst    *Instrumentation
	q       *prioq.Queue
	name    string
	counter func(name string) int64
}

func setup(t *testing.T, parentChild bool) *fixture {
	f := &fixture{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	var err error
	f.inst, err = New(Config{TracerProvider: tp, MeterProvider: mp, ParentChild: parentChild})
	require.NoError(t, err)
	f.name = testkit.QueueName(t)
	f.q, err = prioq.Open(context.Background(), client, f.name, prioq.Config{Layout: prioq.Levels(3), MaxAttempts: 2,
		Backoff:           func(int) time.Duration { return time.Millisecond },
		EnqueueMiddleware: []prioq.EnqueueMiddleware{f.inst.Enqueue(f.name)}})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = f.q.Purge(context.Background()); _, _ = f.q.PurgeDead(context.Background()) })
	f.counter = func(name string) int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, f.reader.Collect(context.Background(), &rm))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				sum, ok := m.Data.(metricdata.Sum[int64])
				require.True(t, ok, "%s is a sum", name)
				require.True(t, sum.IsMonotonic, "%s is monotonic", name)
				var n int64
				for _, dp := range sum.DataPoints {
					v, _ := dp.Attributes.Value(attribute.Key("messaging.destination.name"))
					assert.Equal(t, f.name, v.AsString())
					n += dp.Value
				}
				return n
			}
		}
		return 0
	}
	return f
}

// durations counts the prioq.handler.duration records by prioq.outcome.
func (f *fixture) durations(t *testing.T) map[string]uint64 {
	var rm metricdata.ResourceMetrics
	require.NoError(t, f.reader.Collect(context.Background(), &rm))
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "prioq.handler.duration" {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			require.True(t, ok, "prioq.handler.duration is a histogram")
			for _, dp := range h.DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key("prioq.outcome"))
				out[v.AsString()] += dp.Count
			}
		}
	}
	return out
}

// run handles messages with h until want deliveries happened.
func (f *fixture) run(t *testing.T, want int, h prioq.Handler) {
	cons, err := f.q.NewConsumer(prioq.ConsumerConfig{Middleware: []prioq.Middleware{f.inst.Handler()},
		OnSweep: f.inst.Swept(f.name), Lease: 300 * time.Millisecond, SweepInterval: 50 * time.Millisecond,
		NoRenew: true}) // slow (below) outlives its lease
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	n := 0
	done := make(chan error, 1)
	go func() {
		done <- cons.Run(ctx, func(ctx context.Context, m *prioq.Message) error {
			mu.Lock()
			n++
			mu.Unlock()
			return h(ctx, m)
		})
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return n >= want }, 15*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // the last acks and retries land
	stop()
	<-done
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, cons.Close(cctx))
}

// A run with an ack, a retry, a dead letter and an expired lease: the spans
// are linked to their producer spans, and every counter has its exact value.
func TestSpansAndCounters(t *testing.T) {
	f := setup(t, false)
	ctx := context.Background()
	for _, id := range []string{"ok", "flaky", "doomed"} {
		_, err := f.q.Enqueue(ctx, []byte(id), prioq.ID(id), prioq.Priority(2))
		require.NoError(t, err)
	}
	_, err := f.q.EnqueueBatch(ctx, []prioq.EnqueueItem{{Payload: []byte("slow"), Options: []prioq.Option{prioq.ID("slow")}}})
	require.NoError(t, err)

	var mu sync.Mutex
	seen := map[string]int{}
	// ok: acked. flaky: fails once, then acked. doomed: fails twice (MaxAttempts 2): dead.
	// slow: outlives its lease once (redelivered by the sweep), then acked.
	f.run(t, 7, func(ctx context.Context, m *prioq.Message) error {
		mu.Lock()
		seen[m.ID]++
		k := seen[m.ID]
		mu.Unlock()
		switch {
		case m.ID == "flaky" && k == 1, m.ID == "doomed":
			return errors.New("boom")
		case m.ID == "slow" && k == 1:
			<-ctx.Done()                       // the lease ended
			time.Sleep(300 * time.Millisecond) // and the sweep gave the message back
			return nil                         // too late: the ack fails
		}
		return nil
	})
	assert.Equal(t, int64(4), f.counter("prioq.messages.enqueued"))
	assert.Equal(t, int64(7), f.counter("prioq.messages.delivered"))
	// slow's first handler returned nil, but its ack failed: before
	// AfterFinish, that counted as acked.
	assert.Equal(t, int64(3), f.counter("prioq.messages.acked"), "ok, flaky's second, slow's second")
	assert.Equal(t, int64(1), f.counter("prioq.messages.unfinished"), "slow's first: its ack lost the lease")
	assert.Equal(t, int64(2), f.counter("prioq.messages.retried"), "flaky's and doomed's first")
	assert.Equal(t, int64(1), f.counter("prioq.messages.dead_lettered"), "doomed's second")
	assert.Equal(t, int64(1), f.counter("prioq.messages.redelivered"), "slow's expired lease")
	assert.Equal(t, map[string]uint64{"acked": 3, "unfinished": 1, "retried": 2, "dead_lettered": 1},
		f.durations(t), "handler durations by outcome")

	var producers, consumers []sdktrace.ReadOnlySpan
	for _, s := range f.spans.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			producers = append(producers, s)
		case trace.SpanKindConsumer:
			consumers = append(consumers, s)
		}
	}
	for _, s := range append(producers, consumers...) {
		links := ""
		for _, l := range s.Links() {
			links += " link→" + l.SpanContext.TraceID().String()[:8] + "/" + l.SpanContext.SpanID().String()[:8]
		}
		t.Logf("%-8s %-40s trace %s span %s%s", s.SpanKind(), s.Name(), s.SpanContext().TraceID().String()[:8],
			s.SpanContext().SpanID().String()[:8], links)
	}
	require.Len(t, producers, 4)
	require.Len(t, consumers, 7)
	byID := map[string]trace.SpanContext{}
	for _, p := range producers {
		assert.Equal(t, "send "+f.name, p.Name())
		for _, a := range p.Attributes() {
			if a.Key == "messaging.message.id" {
				byID[a.Value.AsString()] = p.SpanContext()
			}
		}
	}
	require.Len(t, byID, 4)
	for _, c := range consumers {
		assert.Equal(t, "process "+f.name, c.Name())
		var id string
		var attempt int64
		for _, a := range c.Attributes() {
			switch a.Key {
			case "messaging.message.id":
				id = a.Value.AsString()
			case "prioq.attempt":
				attempt = a.Value.AsInt64()
			}
		}
		require.Len(t, c.Links(), 1, "linked to its producer span")
		assert.Equal(t, byID[id].SpanID(), c.Links()[0].SpanContext.SpanID(), "the link is to %s's producer span", id)
		assert.NotEqual(t, byID[id].TraceID(), c.SpanContext().TraceID(), "a trace of its own")
		assert.False(t, c.Parent().IsValid())
		assert.GreaterOrEqual(t, attempt, int64(1))
	}
}

// With ParentChild a delivery's span is in its producer's trace.
func TestParentChild(t *testing.T) {
	f := setup(t, true)
	_, err := f.q.Enqueue(context.Background(), []byte("x"), prioq.ID("pc"))
	require.NoError(t, err)
	f.run(t, 1, func(context.Context, *prioq.Message) error { return nil })
	var producer, consumer sdktrace.ReadOnlySpan
	for _, s := range f.spans.Ended() {
		if s.SpanKind() == trace.SpanKindProducer {
			producer = s
		} else if s.SpanKind() == trace.SpanKindConsumer {
			consumer = s
		}
	}
	require.NotNil(t, producer)
	require.NotNil(t, consumer)
	assert.Equal(t, producer.SpanContext().TraceID(), consumer.SpanContext().TraceID())
	assert.Equal(t, producer.SpanContext().SpanID(), consumer.Parent().SpanID())
	assert.Empty(t, consumer.Links())
}

// The queue time of a delayed message starts when it is due, not when it was
// enqueued: a 1.5 s delay must not show as 1.5 s of waiting.
func TestQueueTimeStartsWhenDue(t *testing.T) {
	f := setup(t, false)
	_, err := f.q.Enqueue(context.Background(), []byte("x"), prioq.Delay(1500*time.Millisecond))
	require.NoError(t, err)
	f.run(t, 1, func(context.Context, *prioq.Message) error { return nil })
	var rm metricdata.ResourceMetrics
	require.NoError(t, f.reader.Collect(context.Background(), &rm))
	var found bool
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "prioq.message.queue_time" {
				continue
			}
			h := m.Data.(metricdata.Histogram[float64])
			require.Len(t, h.DataPoints, 1)
			dp := h.DataPoints[0]
			require.Equal(t, uint64(1), dp.Count)
			found = true
			assert.Less(t, dp.Sum, 1.0, "measured from the due time (promotion takes milliseconds), not from the enqueue")
			assert.GreaterOrEqual(t, dp.Sum, 0.0)
		}
	}
	require.True(t, found)
}
