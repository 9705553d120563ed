package prioq_test

// The examples run with the tests (go test -run Example .) against the Redis
// the tests find, and their output is checked. One file per feature:
// example_<feature>_test.go. The README's 30-second example is Example below.

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
	// for 7 (docs/operating.md says how to size a pool).
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
		fmt.Println(string(m.Payload)) // "password reset", then "weekly digest"
		m.Ack(ctx)                     // done: without it the message comes back when its lease ends
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
