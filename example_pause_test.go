package prioq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// Pause stops consumers from taking (producers still enqueue); Resume wakes
// them. AtLeastOnce queues only.
func ExampleQueue_Pause() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-exports", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)

	q.Pause(ctx)
	q.Enqueue(ctx, []byte("export"))
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = cons.Receive(short)
	cancel()
	fmt.Println("paused:", errors.Is(err, context.DeadlineExceeded))

	q.Resume(ctx)
	m, err := cons.Receive(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("resumed:", string(m.Payload))
	m.Ack(ctx)
	// Output:
	// paused: true
	// resumed: export
}
