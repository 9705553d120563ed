package prioq_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// Request and reply: the handler gives its message a result, written with
// its ack (only by the holder of the lease), and the producer waits for it
// without polling. Progress shows while the handler works.
func ExampleQueue_WaitResult() {
	ctx := context.Background()
	client, err := radix.PoolConfig{Size: 4}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-results", prioq.Config{
		Retain: prioq.Retention{Max: 1000, For: time.Hour}, // keep the last 1000 outcomes, an hour at most
	})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go cons.Run(rctx, func(ctx context.Context, m *prioq.Message) error {
		n, _ := strconv.Atoi(string(m.Payload))
		if err := m.Progress(ctx, 50, "squaring"); err != nil {
			return err
		}
		return m.SetResult([]byte(strconv.Itoa(n * n)))
	})

	id, _ := q.Enqueue(ctx, []byte("12"))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := q.WaitResult(wctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Outcome, string(r.Value), "after", r.Attempts, "attempt")
	// Output:
	// acked 144 after 1 attempt
}
