package prioq_test

import (
	"context"
	"fmt"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// A queue of several shards spreads over a Redis Cluster's primaries; on one
// Redis (as here) it works the same, which is how to try it out. One consumer
// draining it gets strict priority order across the shards.
func ExampleConfig_shards() {
	ctx := context.Background()
	client, err := radix.PoolConfig{Size: 16}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-orders", prioq.Config{Layout: prioq.Levels(3), Shards: 4})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	// An ordering key picks the key's shard: one customer's messages of one
	// priority stay in order. Without one, messages go round robin.
	q.Enqueue(ctx, []byte("ship order 1"), prioq.Priority(1), prioq.OrderingKey("customer-7"))
	q.Enqueue(ctx, []byte("ship order 2"), prioq.Priority(1), prioq.OrderingKey("customer-7"))
	q.Enqueue(ctx, []byte("refund"), prioq.Priority(2), prioq.OrderingKey("customer-9"))
	q.Enqueue(ctx, []byte("newsletter"), prioq.Priority(0))

	st, _ := q.Stats(ctx)
	fmt.Println("shards", q.Shards(), len(st.Shards), "ready", st.Ready)
	// A consumer keeps one blocking wait per shard (4 connections here).
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
		fmt.Println(m.Priority, string(m.Payload))
		m.Ack(ctx)
	}
	// Output:
	// shards 4 4 ready 4
	// 2 refund
	// 1 ship order 1
	// 1 ship order 2
	// 0 newsletter
}
