package prioq_test

import (
	"context"
	"fmt"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// Headers carry metadata beside the payload; middleware sees every delivery.
func ExampleConsumerConfig_middleware() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-middleware", prioq.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Purge(ctx)
	if _, err := q.Enqueue(ctx, []byte("report"), prioq.Headers(map[string]string{"tenant": "acme"})); err != nil {
		fmt.Println(err)
		return
	}
	logTenant := func(next prioq.Handler) prioq.Handler {
		return func(ctx context.Context, m *prioq.Message) error {
			fmt.Println("tenant", m.Headers["tenant"])
			return next(ctx, m)
		}
	}
	cons, err := q.NewConsumer(prioq.ConsumerConfig{Middleware: []prioq.Middleware{logTenant}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cons.Close(ctx)
	runCtx, stop := context.WithCancel(ctx)
	_ = cons.Run(runCtx, func(ctx context.Context, m *prioq.Message) error {
		fmt.Println("handled", string(m.Payload))
		stop()
		return nil
	})
	// Output:
	// tenant acme
	// handled report
}

// AfterFinish tells middleware what really happened to a delivery once Run
// has finished it: acked, retried, dead-lettered, or unfinished.
func ExampleMessage_AfterFinish() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-outcomes", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	q.Enqueue(ctx, []byte("resize"))

	runCtx, stop := context.WithCancel(ctx)
	outcomes := func(next prioq.Handler) prioq.Handler {
		return func(ctx context.Context, m *prioq.Message) error {
			m.AfterFinish(func(o prioq.Outcome, err error) {
				fmt.Println(string(m.Payload), o, err)
				stop()
			})
			return next(ctx, m)
		}
	}
	cons, err := q.NewConsumer(prioq.ConsumerConfig{Middleware: []prioq.Middleware{outcomes}})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	cons.Run(runCtx, func(ctx context.Context, m *prioq.Message) error { return nil })
	// Output:
	// resize acked <nil>
}
