package prioq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// After MaxAttempts failures a message goes to the queue's dead-letter list
// with its last error; RequeueDead puts it back in its lane.
func ExampleQueue_DeadLetters() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-invoices", prioq.Config{MaxAttempts: 2})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	defer q.PurgeDead(ctx)

	id, _ := q.Enqueue(ctx, []byte("invoice 7"), prioq.ID("invoice-7"))
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
		// Retry counts an attempt; the last one moves the message to the
		// dead letters instead of back into its lane.
		fmt.Println("attempt", m.Attempts, "last:", m.LastAttempt())
		m.Retry(ctx, 10*time.Millisecond, "printer offline")
	}

	dead, _ := q.DeadLetters(ctx, 0, 10)
	fmt.Println(dead[0].ID, "dead:", dead[0].Reason)
	// Enqueueing the id again is refused while the dead letter lives.
	_, err = q.Enqueue(ctx, []byte("invoice 7"), prioq.ID("invoice-7"))
	fmt.Println(errors.Is(err, prioq.ErrDuplicate))

	fmt.Println(q.RequeueDead(ctx, id))
	m, err := cons.Receive(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(m.Payload), "back")
	m.Ack(ctx)
	// Output:
	// attempt 1 last: false
	// attempt 2 last: true
	// invoice-7 dead: printer offline
	// true
	// <nil>
	// invoice 7 back
}
