package prioq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// A delayed message waits in the queue's delayed set and is promoted to its
// lane when due (by the Redis server's clock), not on a polling interval; a
// message that is ready meanwhile is served first.
func ExampleDelay() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-reminders", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	due := time.Now().Add(time.Second)
	q.Enqueue(ctx, []byte("in a second"), prioq.Priority(2), prioq.Delay(time.Second))
	q.Enqueue(ctx, []byte("now"), prioq.Priority(0))
	st, _ := q.Stats(ctx)
	fmt.Println("ready", st.Ready, "delayed", st.Delayed)

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
		if i == 1 {
			fmt.Println(string(m.Payload), "not before its time:", !time.Now().Before(due))
		} else {
			fmt.Println(string(m.Payload))
		}
		m.Ack(ctx)
	}
	// Output:
	// ready 1 delayed 1
	// now
	// in a second not before its time: true
}
