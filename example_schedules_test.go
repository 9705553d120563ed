package prioq_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// A schedule enqueues its payload at each tick of its spec, once per tick
// however many consumers run: the consumers' promoters fire it, on the Redis
// server's clock. Each tick's message has an id made of the schedule's name
// and the tick's time.
func ExampleQueue_Schedule() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-schedules", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	// Every day at 03:00 in Paris, and every 200 ms.
	if _, err := q.Schedule(ctx, "nightly-report", "CRON_TZ=Europe/Paris 0 3 * * *", []byte("report"), prioq.Priority(1)); err != nil {
		panic(err)
	}
	if _, err := q.Schedule(ctx, "heartbeat", "@every 200ms", []byte("beat"), prioq.Missed(prioq.MissedSkip)); err != nil {
		panic(err)
	}
	defer q.Unschedule(ctx, "nightly-report")
	defer q.Unschedule(ctx, "heartbeat")
	_, err = q.Schedule(ctx, "bad", "0 25 * * *", []byte("x"))
	fmt.Println("refused:", err != nil)

	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	for range 2 {
		m, err := cons.Receive(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(string(m.Payload), strings.HasPrefix(m.ID, "sched:heartbeat:"))
		m.Ack(ctx)
	}
	list, _ := q.Schedules(ctx)
	for _, s := range list {
		fmt.Println(s.Name, s.Spec, "fired:", !s.LastFired.IsZero())
	}
	// Output:
	// refused: true
	// beat true
	// beat true
	// heartbeat @every 200ms fired: true
	// nightly-report CRON_TZ=Europe/Paris 0 3 * * * fired: false
}
