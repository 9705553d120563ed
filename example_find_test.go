package prioq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// Where is my message: one message by id, in whatever state it is.
func ExampleQueue_Message() {
	ctx := context.Background()
	client, err := radix.PoolConfig{Size: 4}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-find", prioq.Config{Layout: prioq.Levels(3)})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	q.Enqueue(ctx, []byte("invoice"), prioq.ID("invoice-1"), prioq.Priority(2))
	q.Enqueue(ctx, []byte("invoice"), prioq.ID("invoice-2"), prioq.Priority(2))
	q.Enqueue(ctx, []byte("report"), prioq.ID("report-1"), prioq.Delay(time.Hour))

	for _, id := range []string{"invoice-2", "report-1", "nothing-1"} {
		st, err := q.Message(ctx, id)
		switch {
		case errors.Is(err, prioq.ErrNotFound):
			fmt.Println(id, "is nowhere")
		case err != nil:
			panic(err)
		case st.State == prioq.MessageReady:
			fmt.Println(id, "is ready in lane", st.Lane, "with", st.Ahead, "before it")
		case st.State == prioq.MessageDelayed:
			fmt.Println(id, "is delayed, due in about", time.Until(st.Due).Round(time.Hour))
		default:
			fmt.Println(id, "is", st.State)
		}
	}
	// Output:
	// invoice-2 is ready in lane 2 with 1 before it
	// report-1 is delayed, due in about 1h0m0s
	// nothing-1 is nowhere
}
