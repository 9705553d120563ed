package main

import (
	"context"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/prioqotel"
)

// The cost of instrumentation, measured beside the same system without it:
// middleware that does nothing (the hooks' own cost), and prioqotel with the
// OpenTelemetry SDK recording every span and metric but exporting nothing
// (the SDK's cost, without any exporter's).

func passEnqueue(string) prioq.EnqueueMiddleware {
	return func(next prioq.EnqueueFunc) prioq.EnqueueFunc { return next }
}

var passHandler prioq.Middleware = func(next prioq.Handler) prioq.Handler {
	return func(ctx context.Context, m *prioq.Message) error { return next(ctx, m) }
}

var benchOtel = func() *prioqotel.Instrumentation {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	inst, err := prioqotel.New(prioqotel.Config{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		panic(err)
	}
	return inst
}()

func otelEnqueue(queue string) prioq.EnqueueMiddleware { return benchOtel.Enqueue(queue) }

var otelHandler = benchOtel.Handler()
