package prioqotel_test

import (
	"context"
	"log"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/prioqotel"
)

// Trace and measure one queue with the global OpenTelemetry providers (set
// them up with the SDK and exporters of your choice first).
func ExampleNew() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", "127.0.0.1:6379")
	if err != nil {
		log.Fatal(err)
	}
	inst, err := prioqotel.New(prioqotel.Config{})
	if err != nil {
		log.Fatal(err)
	}
	q, err := prioq.Open(ctx, client, "orders", prioq.Config{
		EnqueueMiddleware: []prioq.EnqueueMiddleware{inst.Enqueue("orders")},
	})
	if err != nil {
		log.Fatal(err)
	}
	cons, err := q.NewConsumer(prioq.ConsumerConfig{
		Middleware: []prioq.Middleware{inst.Handler()},
		OnSweep:    inst.Swept("orders"),
	})
	if err != nil {
		log.Fatal(err)
	}
	_, _ = q.Enqueue(ctx, []byte("order 42")) // a "send orders" span, its context in the headers
	_ = cons.Run(ctx, func(ctx context.Context, m *prioq.Message) error {
		return nil // runs inside a "process orders" span linked to the producer's
	})
}
