package prioq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// Groups: within a priority, the tenants with work are served in turn, and a
// limit counts a tenant's messages in flight across every consumer.
func ExampleGroup() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-tenants", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	// A loud tenant enqueues first; a quiet one still gets its turn.
	for i := 0; i < 3; i++ {
		q.Enqueue(ctx, []byte(fmt.Sprint("report ", i)), prioq.Group("loud"))
	}
	q.Enqueue(ctx, []byte("invoice"), prioq.Group("quiet"))
	// At most one message of a tenant in flight, across every consumer.
	if err := q.SetGroupLimit(ctx, "", prioq.GroupLimit{Concurrency: 1}); err != nil {
		panic(err)
	}

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
		fmt.Println(m.Group, string(m.Payload))
		m.Ack(ctx)
	}
	// Output:
	// loud report 0
	// quiet invoice
	// loud report 1
	// loud report 2
}

// A tenant limited to 2 messages in 5 seconds is skipped once it has had them;
// the others go on, and nobody polls: its turn comes back when its window
// lets it (GroupLimit.Rate), or at once when the limit is lifted.
func ExampleGroupLimit_rate() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-rates", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	trial := prioq.GroupLimit{Rate: prioq.Rate{N: 2, Per: 5 * time.Second}}
	if err := q.SetGroupLimit(ctx, "trial", trial); err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		q.Enqueue(ctx, []byte(fmt.Sprint("export ", i)), prioq.Group("trial"))
	}
	q.Enqueue(ctx, []byte("export 0"), prioq.Group("paid"))

	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	receive := func() {
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		m, err := cons.Receive(short)
		if err != nil {
			fmt.Println("nothing: trial waits for its window")
			return
		}
		fmt.Println(m.Group, string(m.Payload))
		m.Ack(ctx)
	}
	for i := 0; i < 4; i++ {
		receive()
	}
	gs, _ := q.Groups(ctx, 1)
	fmt.Println(gs[0].Group, "ready", gs[0].Ready, "rate", gs[0].Rate, "at its rate limit", gs[0].RateParked)
	q.SetGroupLimit(ctx, "trial", prioq.GroupLimit{}) // lifted: back at once
	receive()
	// Output:
	// trial export 0
	// paid export 0
	// trial export 1
	// nothing: trial waits for its window
	// trial ready 1 rate 2/5s at its rate limit true
	// trial export 2
}
