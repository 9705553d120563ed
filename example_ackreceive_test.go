package prioq_test

import (
	"context"
	"fmt"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// A loop of single calls that acks each message in the call that receives
// the next: one round trip a message instead of two (Receive, then Ack).
func ExampleConsumer_AckAndReceive() {
	ctx := context.Background()
	client, err := radix.PoolConfig{Size: 8}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-ackreceive", prioq.Config{Layout: prioq.Levels(3)})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	for _, job := range []string{"resize a.png", "resize b.png", "resize c.png"} {
		if _, err := q.Enqueue(ctx, []byte(job)); err != nil {
			panic(err)
		}
	}

	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	m, err := cons.Receive(ctx) // the first: nothing to ack yet
	for i := 0; err == nil; i++ {
		fmt.Println(string(m.Payload))
		if i == 2 {
			break
		}
		// Acks m and takes the next, in one round trip. When the ack
		// fails (ErrLeaseLost), no message comes back with the error.
		m, err = cons.AckAndReceive(ctx, m)
	}
	if err != nil {
		panic(err)
	}
	if err := m.Ack(ctx); err != nil { // the last one
		panic(err)
	}
	st, _ := q.Stats(ctx)
	fmt.Println("in flight:", st.InFlight, "ready:", st.Ready)
	// Output:
	// resize a.png
	// resize b.png
	// resize c.png
	// in flight: 0 ready: 0
}
