// Package prioqotel instruments prioq with OpenTelemetry: spans for enqueues
// and deliveries, W3C trace context carried in message headers, and counters
// and histograms of what the queues do. It depends on the OpenTelemetry API
// only; the program chooses the SDK and exporters.
//
//	inst, err := prioqotel.New(prioqotel.Config{})
//	q, err := prioq.Open(ctx, client, "orders", prioq.Config{
//		EnqueueMiddleware: []prioq.EnqueueMiddleware{inst.Enqueue("orders")},
//	})
//	cons, err := q.NewConsumer(prioq.ConsumerConfig{
//		Middleware: []prioq.Middleware{inst.Handler()},
//		OnSweep:    inst.Swept("orders"),
//	})
//
// # Spans
//
// An Enqueue or EnqueueBatch call is one span, "send <queue>" (kind
// Producer); its context is injected into every message's headers with the
// configured propagator. A delivery handled by Run is one span, "process
// <queue>" (kind Consumer). By default the consumer span starts a trace of
// its own and is linked to the producer span: a message may run hours later,
// after retries, and one trace per message keeps traces small. With
// Config.ParentChild the consumer span is a child of the producer span.
// Attributes follow the OpenTelemetry messaging conventions:
// messaging.system "prioq", messaging.destination.name (the queue),
// messaging.operation.type, messaging.message.id, messaging.batch.message_count;
// and prioq.priority and prioq.attempt.
//
// # Metrics
//
// Monotonic counters, each with the queue as messaging.destination.name:
//
//	prioq.messages.enqueued       stored by Enqueue and EnqueueBatch
//	prioq.messages.delivered      handed to a handler by Run
//	prioq.messages.acked          handlers that returned nil, once the ack was made
//	prioq.messages.retried        handlers that failed, once the retry was stored
//	prioq.messages.dead_lettered  handlers that failed for the last time, and expired leases past MaxAttempts
//	prioq.messages.unfinished     deliveries whose ack or retry did not happen (a lost lease, Redis
//	                              unreachable): the message is delivered again after its lease
//	prioq.messages.redelivered    expired leases given back by the sweep
//
// The outcome counters and prioq.outcome come from what Run did after the
// handler returned (prioq.Message.AfterFinish), not from the handler's
// return value alone.
//
// Histograms, in seconds: prioq.handler.duration (handler run time, with
// the outcome as prioq.outcome) and prioq.message.queue_time, the pickup
// latency: from when a message became ready (its enqueue, or for a delayed
// one its due time, recorded by Enqueue in the ReadyAtHeader header) to the
// start of its first delivery's handler. Retries are not counted in it.
package prioqotel

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/prioq/prioq"
)

// ReadyAtHeader is the header in which Enqueue records when a delayed
// message is due (unix milliseconds), so that its queue time starts then.
const ReadyAtHeader = "prioq-ready-at"

// ScopeName is the instrumentation scope of prioq's tracer and meter.
const ScopeName = "github.com/prioq/prioq/prioqotel"

// Config configures the instrumentation. The zero value uses the global
// providers and propagator of go.opentelemetry.io/otel.
type Config struct {
	// TracerProvider makes the spans. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// MeterProvider makes the counters and histograms. Defaults to
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider

	// Propagator injects the producer span's context into message headers
	// and extracts it on delivery. Defaults to otel.GetTextMapPropagator();
	// when that is a no-op (nothing configured), W3C trace context.
	Propagator propagation.TextMapPropagator

	// ParentChild makes a delivery's span a child of its producer span
	// instead of a root span linked to it.
	ParentChild bool
}

// Instrumentation makes prioq middleware that traces and measures.
type Instrumentation struct {
	cfg                                 Config
	tracer                              trace.Tracer
	enqueued, delivered, acked, retried metric.Int64Counter
	dead, redelivered, unfinished       metric.Int64Counter
	duration, queueTime                 metric.Float64Histogram

	queues sync.Map // queue name -> *queueAttrs, made once per queue
}

// queueAttrs is what every span and measurement of one queue shares, built
// once rather than per message.
type queueAttrs struct {
	send, process string               // span names
	spanSend      []attribute.KeyValue // without the per-call ones
	spanProcess   []attribute.KeyValue
	metric        metric.MeasurementOption
	outcome       map[prioq.Outcome]metric.MeasurementOption // by prioq.outcome
}

func (in *Instrumentation) attrs(queue string) *queueAttrs {
	if a, ok := in.queues.Load(queue); ok {
		return a.(*queueAttrs)
	}
	dest := attribute.String("messaging.destination.name", queue)
	a := &queueAttrs{send: "send " + queue, process: "process " + queue,
		spanSend:    []attribute.KeyValue{system, dest, attribute.String("messaging.operation.type", "send")},
		spanProcess: []attribute.KeyValue{system, dest, attribute.String("messaging.operation.type", "process")},
		metric:      metric.WithAttributes(system, dest),
		outcome:     map[prioq.Outcome]metric.MeasurementOption{}}
	for _, o := range []prioq.Outcome{prioq.OutcomeAcked, prioq.OutcomeRetried, prioq.OutcomeDeadLettered,
		prioq.OutcomeFailed, prioq.OutcomeUnfinished, prioq.OutcomeCancelled} {
		a.outcome[o] = metric.WithAttributes(system, dest, attribute.String("prioq.outcome", o.String()))
	}
	got, _ := in.queues.LoadOrStore(queue, a)
	return got.(*queueAttrs)
}

var system = attribute.String("messaging.system", "prioq")

// New returns an Instrumentation; an error means an instrument could not be
// made by the MeterProvider.
func New(cfg Config) (*Instrumentation, error) {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = otel.GetTextMapPropagator()
		if len(cfg.Propagator.Fields()) == 0 {
			cfg.Propagator = propagation.TraceContext{}
		}
	}
	in := &Instrumentation{cfg: cfg, tracer: cfg.TracerProvider.Tracer(ScopeName)}
	m := cfg.MeterProvider.Meter(ScopeName)
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{message}"))
		errs = append(errs, err)
		return c
	}
	in.enqueued = counter("prioq.messages.enqueued", "Messages stored by Enqueue and EnqueueBatch.")
	in.delivered = counter("prioq.messages.delivered", "Messages handed to a handler by Run.")
	in.acked = counter("prioq.messages.acked", "Handlers that returned nil, and whose ack was made.")
	in.retried = counter("prioq.messages.retried", "Handlers that failed; the message will be retried.")
	in.unfinished = counter("prioq.messages.unfinished",
		"Deliveries whose ack or retry did not happen (lease lost, Redis error): delivered again after the lease.")
	in.dead = counter("prioq.messages.dead_lettered", "Messages moved to the dead letters.")
	in.redelivered = counter("prioq.messages.redelivered", "Expired leases given back to their lane by the sweep.")
	var err error
	in.duration, err = m.Float64Histogram("prioq.handler.duration", metric.WithDescription("Handler run time."), metric.WithUnit("s"))
	errs = append(errs, err)
	in.queueTime, err = m.Float64Histogram("prioq.message.queue_time",
		metric.WithDescription("From ready (enqueued, or due) to the start of the first delivery's handler."), metric.WithUnit("s"))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return in, nil
}

// headerCarrier adapts message headers to the propagator.
type headerCarrier map[string]string

func (h headerCarrier) Get(k string) string { return h[k] }
func (h headerCarrier) Set(k, v string)     { h[k] = v }
func (h headerCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// Enqueue returns the EnqueueMiddleware for the queue named queue (the name
// it was opened with): one producer span per call, its context injected into
// every item's headers, and the enqueued counter.
func (in *Instrumentation) Enqueue(queue string) prioq.EnqueueMiddleware {
	qa := in.attrs(queue)
	return func(next prioq.EnqueueFunc) prioq.EnqueueFunc {
		return func(ctx context.Context, items []prioq.EnqueueItem) ([]prioq.EnqueueResult, error) {
			ctx, span := in.tracer.Start(ctx, qa.send, trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithAttributes(qa.spanSend...),
				trace.WithAttributes(attribute.Int("messaging.batch.message_count", len(items))))
			defer span.End()
			carrier := headerCarrier{}
			in.cfg.Propagator.Inject(ctx, carrier)
			// One option for every item: prioq.Headers copies what it is given.
			withTrace := prioq.Headers(carrier)
			now := time.Now()
			out := make([]prioq.EnqueueItem, len(items))
			for i, it := range items {
				opts := append(slices.Clip(it.Options), withTrace)
				if ready := it.ReadyAt(now); ready.After(now) {
					// A delayed message's queue time starts when it is due.
					opts = append(opts, prioq.Headers(map[string]string{ReadyAtHeader: strconv.FormatInt(ready.UnixMilli(), 10)}))
				}
				out[i] = prioq.EnqueueItem{Payload: it.Payload, Options: opts}
			}
			res, err := next(ctx, out)
			stored := 0
			for _, r := range res {
				if r.Err == nil && !r.Folded { // a folded debounce stored nothing
					stored++
				}
			}
			if len(res) == 1 {
				span.SetAttributes(attribute.String("messaging.message.id", res[0].ID))
			}
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			if stored > 0 {
				in.enqueued.Add(ctx, int64(stored), qa.metric)
			}
			return res, err
		}
	}
}

// Handler returns the Middleware for Run: one consumer span per delivery,
// linked to (or, with ParentChild, a child of) its producer span, the
// delivery counters and the histograms.
func (in *Instrumentation) Handler() prioq.Middleware {
	return func(next prioq.Handler) prioq.Handler {
		return func(ctx context.Context, m *prioq.Message) error {
			start := time.Now()
			qa := in.attrs(m.Queue())
			producer := trace.SpanContextFromContext(in.cfg.Propagator.Extract(context.Background(), headerCarrier(m.Headers)))
			opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(qa.spanProcess...),
				trace.WithAttributes(attribute.String("messaging.message.id", m.ID),
					attribute.Int64("prioq.priority", m.Priority), attribute.Int("prioq.attempt", m.Attempts))}
			if producer.IsValid() {
				if in.cfg.ParentChild {
					ctx = trace.ContextWithRemoteSpanContext(ctx, producer)
				} else {
					opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: producer}))
				}
			}
			ctx, span := in.tracer.Start(ctx, qa.process, opts...)
			defer span.End()
			attrs := qa.metric
			in.delivered.Add(ctx, 1, attrs)
			if m.Attempts <= 1 && !m.EnqueuedAt.IsZero() {
				ready := m.EnqueuedAt
				if ms, err := strconv.ParseInt(m.Headers[ReadyAtHeader], 10, 64); err == nil {
					ready = time.UnixMilli(ms)
				}
				in.queueTime.Record(ctx, max(0, start.Sub(ready).Seconds()), attrs)
			}
			// What happened is known only once Run has finished the
			// delivery: an ack can still fail (a lost lease) after the
			// handler returned nil.
			took := time.Duration(0)
			m.AfterFinish(func(o prioq.Outcome, _ error) {
				mctx := context.WithoutCancel(ctx)
				switch o {
				case prioq.OutcomeAcked:
					in.acked.Add(mctx, 1, attrs)
				case prioq.OutcomeDeadLettered:
					in.dead.Add(mctx, 1, attrs)
				case prioq.OutcomeRetried:
					in.retried.Add(mctx, 1, attrs)
				case prioq.OutcomeUnfinished:
					in.unfinished.Add(mctx, 1, attrs)
				}
				in.duration.Record(mctx, took.Seconds(), qa.outcome[o])
			})
			defer func() { took = time.Since(start) }() // also when next panics: Run recovers, then finishes
			err := next(ctx, m)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
	}
}

// Swept returns the ConsumerConfig.OnSweep callback for the queue named
// queue: it counts expired leases redelivered and dead-lettered.
func (in *Instrumentation) Swept(queue string) func(redelivered, deadLettered int) {
	attrs := in.attrs(queue).metric
	return func(redelivered, deadLettered int) {
		ctx := context.Background()
		if redelivered > 0 {
			in.redelivered.Add(ctx, int64(redelivered), attrs)
		}
		if deadLettered > 0 {
			in.dead.Add(ctx, int64(deadLettered), attrs)
		}
	}
}
