package prioq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// Operating a queue: which consumers serve it (the worker registry), what
// waits for its due time, and running one of those now.
func ExampleQueue_Workers() {
	ctx := context.Background()
	client, err := radix.PoolConfig{Size: 8}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-operating", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	q.Enqueue(ctx, []byte("monthly report"), prioq.ID("report-11"), prioq.Delay(time.Hour))
	q.Enqueue(ctx, []byte("reminder"), prioq.ID("remind-7"), prioq.Delay(2*time.Hour))
	delayed, _ := q.Scheduled(ctx, 0, 10) // soonest due first
	for _, m := range delayed {
		fmt.Println("delayed:", m.ID, "due in about", time.Until(m.Due).Round(time.Hour))
	}

	cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 4})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	// A consumer registers as it starts; a queue with ready messages and no
	// workers is one nobody works on.
	for {
		ws, _ := q.Workers(ctx)
		if len(ws) > 0 {
			fmt.Println("worker:", ws[0].Kind, ws[0].Queues, "concurrency", ws[0].Concurrency)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	if err := q.RunNow(ctx, "report-11"); err != nil { // not an hour from now: now
		panic(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("received:", string(m.Payload))
	m.Ack(ctx)
	// Output:
	// delayed: report-11 due in about 1h0m0s
	// delayed: remind-7 due in about 2h0m0s
	// worker: consumer [example-operating] concurrency 4
	// received: monthly report
}
