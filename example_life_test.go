package prioq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// A long job under a short lease: Run renews the lease while the handler
// works, so a dead process's jobs come back within a second, and
// HandlerTimeout bounds each job whatever its lease. Queue.Cancel stops a
// job in flight from anywhere: its handler's context ends with
// ErrCancelled, and the job is not retried.
func ExampleQueue_Cancel_running() {
	ctx := context.Background()
	client, err := radix.PoolConfig{Size: 8}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-life", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{Lease: time.Second, HandlerTimeout: time.Hour})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)

	q.Enqueue(ctx, []byte("render the video"), prioq.ID("video-1"))
	started, finished := make(chan struct{}), make(chan struct{})
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go cons.Run(rctx, func(ctx context.Context, m *prioq.Message) error {
		m.AfterFinish(func(o prioq.Outcome, _ error) {
			fmt.Println("outcome:", o)
			close(finished)
		})
		close(started)
		select {
		case <-time.After(3 * time.Second): // three leases: renewed meanwhile
			fmt.Println("rendered")
		case <-ctx.Done():
			fmt.Println("stopped:", errors.Is(context.Cause(ctx), prioq.ErrCancelled))
		}
		return ctx.Err()
	})
	<-started
	time.Sleep(1500 * time.Millisecond) // past the first lease: still running
	if err := q.Cancel(ctx, "video-1"); err != nil {
		panic(err)
	}
	<-finished
	// Output:
	// stopped: true
	// outcome: cancelled
}
