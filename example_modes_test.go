package prioq_test

import (
	"context"
	"fmt"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// AtMostOnce is the fast mode: a consumer pops a message with one blocking
// pop, with no lease and no ack. What a crashed consumer held is lost.
func ExampleMode_atMostOnce() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-cache-refresh", prioq.Config{Mode: prioq.AtMostOnce})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	q.Enqueue(ctx, []byte("refresh /home"), prioq.Priority(0))
	q.Enqueue(ctx, []byte("refresh /pricing"), prioq.Priority(2))

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
		fmt.Println(string(m.Payload)) // nothing to ack: it is already gone from Redis
	}
	st, _ := q.Stats(ctx)
	fmt.Println("in flight", st.InFlight)
	// Output:
	// refresh /pricing
	// refresh /home
	// in flight 0
}
