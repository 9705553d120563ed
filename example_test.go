package prioq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

func redisAddr() string {
	if a := os.Getenv("PRIOQ_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

func Example() {
	ctx := context.Background()
	// Each consumer waits on up to 2 connections of the pool: 16 leave room
	// for 7 (see "Pool size" in the README).
	client, err := radix.PoolConfig{Size: 16}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()

	// Three levels: 0 (low) … 2 (high). Reliable delivery is the default.
	q, err := prioq.Open(ctx, client, "example-emails", prioq.Config{Layout: prioq.Levels(3)})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	q.Enqueue(ctx, []byte("weekly digest"), prioq.Priority(0))
	q.Enqueue(ctx, []byte("password reset"), prioq.Priority(2))

	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	for i := 0; i < 2; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(string(m.Payload))
		m.Ack(ctx) // done: without it the message comes back when its lease ends
	}
	// Output:
	// password reset
	// weekly digest
}

func ExampleQueue_Enqueue() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	// A wide priority range split into 16 sorted-set segments.
	q, err := prioq.Open(ctx, client, "example-jobs", prioq.Config{Layout: prioq.Range(-1000, 1000, 16)})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	// A producer-chosen id makes retries of the same enqueue safe.
	id, err := q.Enqueue(ctx, []byte(`{"invoice":42}`), prioq.ID("invoice-42"), prioq.Priority(500))
	fmt.Println(id, err)
	_, err = q.Enqueue(ctx, []byte(`{"invoice":42}`), prioq.ID("invoice-42"), prioq.Priority(500))
	fmt.Println(errors.Is(err, prioq.ErrDuplicate))

	// Delayed: ready in an hour. Cancel works on delayed and ready messages.
	later, _ := q.Enqueue(ctx, []byte("reminder"), prioq.Delay(time.Hour))
	fmt.Println(q.Cancel(ctx, later))

	// Bad input is refused before anything is written.
	_, err = q.Enqueue(ctx, []byte("x"), prioq.Priority(5000))
	fmt.Println(errors.Is(err, prioq.ErrInvalidPriority))
	// Output:
	// invoice-42 <nil>
	// true
	// <nil>
	// true
}

func ExampleConsumer_Run() {
	ctx := context.Background()
	client, err := radix.PoolConfig{Size: 8}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-thumbnails", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	for i := 0; i < 10; i++ {
		q.Enqueue(ctx, []byte(fmt.Sprint("image-", i)), prioq.Priority(int64(i%3)))
	}

	cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 4})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	runCtx, stop := context.WithCancel(ctx)
	var done atomic.Int32
	err = cons.Run(runCtx, func(ctx context.Context, m *prioq.Message) error {
		// Returning nil acks; an error retries with backoff; a panic counts as an error.
		if done.Add(1) == 10 {
			stop() // Run stops taking and waits for handlers in flight
		}
		return nil
	})
	fmt.Println(done.Load(), errors.Is(err, context.Canceled))
	// Output:
	// 10 true
}

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

func ExampleGroup() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-tenants", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	// A loud tenant enqueues first; a quiet one still gets its turn.
	for i := 0; i < 3; i++ {
		q.Enqueue(ctx, []byte(fmt.Sprint("report ", i)), prioq.Group("loud"))
	}
	q.Enqueue(ctx, []byte("invoice"), prioq.Group("quiet"))
	// At most one message of a tenant in flight, across every consumer.
	if err := q.SetGroupLimit(ctx, "", prioq.GroupLimit{Concurrency: 1}); err != nil {
		panic(err)
	}

	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	for i := 0; i < 4; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(m.Group, string(m.Payload))
		m.Ack(ctx)
	}
	// Output:
	// loud report 0
	// quiet invoice
	// loud report 1
	// loud report 2
}

// A tenant limited to 2 messages in 5 seconds is skipped once it has had them;
// the others go on, and nobody polls: its turn comes back when its window
// lets it (GroupLimit.Rate), or at once when the limit is lifted.
func ExampleGroupLimit_rate() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-rates", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	trial := prioq.GroupLimit{Rate: prioq.Rate{N: 2, Per: 5 * time.Second}}
	if err := q.SetGroupLimit(ctx, "trial", trial); err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		q.Enqueue(ctx, []byte(fmt.Sprint("export ", i)), prioq.Group("trial"))
	}
	q.Enqueue(ctx, []byte("export 0"), prioq.Group("paid"))

	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	receive := func() {
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		m, err := cons.Receive(short)
		if err != nil {
			fmt.Println("nothing: trial waits for its window")
			return
		}
		fmt.Println(m.Group, string(m.Payload))
		m.Ack(ctx)
	}
	for i := 0; i < 4; i++ {
		receive()
	}
	gs, _ := q.Groups(ctx, 1)
	fmt.Println(gs[0].Group, "ready", gs[0].Ready, "rate", gs[0].Rate, "at its rate limit", gs[0].RateParked)
	q.SetGroupLimit(ctx, "trial", prioq.GroupLimit{}) // lifted: back at once
	receive()
	// Output:
	// trial export 0
	// paid export 0
	// trial export 1
	// nothing: trial waits for its window
	// trial ready 1 rate 2/5s at its rate limit true
	// trial export 2
}
