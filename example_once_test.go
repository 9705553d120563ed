package prioq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// UniqueFor keeps work from running twice within a window, even after the
// first message was handled: the second "send the invoice" of the same
// order within a day is refused.
func ExampleUniqueFor() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-invoices", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	defer client.Do(ctx, radix.Cmd(nil, "DEL", "prioq:{example-invoices}:uniq:invoice-1001"))

	_, err = q.Enqueue(ctx, []byte("order 1001"), prioq.ID("invoice-1001"), prioq.UniqueFor(24*time.Hour))
	fmt.Println("first:", err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	m, _ := cons.Receive(ctx)
	m.Ack(ctx) // handled: the id is free, the window is not
	_, err = q.Enqueue(ctx, []byte("order 1001"), prioq.ID("invoice-1001"), prioq.UniqueFor(24*time.Hour))
	fmt.Println("again:", errors.Is(err, prioq.ErrDuplicate))
	// Output:
	// first: <nil>
	// again: true
}

// Debounce keeps one message of a burst: the last one, due a second after
// the last enqueue. Ten saves of a document make one reindex.
func ExampleDebounce() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-reindex", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)

	for v := 1; v <= 10; v++ {
		q.Enqueue(ctx, []byte(fmt.Sprintf("doc-7 version %d", v)), prioq.Debounce("doc-7", time.Second))
	}
	st, _ := q.Stats(ctx)
	fmt.Println("delayed", st.Delayed)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	m, _ := cons.Receive(ctx)
	fmt.Println(string(m.Payload))
	m.Ack(ctx)
	// Output:
	// delayed 1
	// doc-7 version 10
}

// MaxWait drops work that waited too long: a price alert enqueued an hour
// ago (here: by a producer whose clock says so) is not sent late; it goes to
// the dead letters instead, and the fresh one runs.
func ExampleMaxWait() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-alerts", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	defer q.PurgeDead(ctx)

	q.Enqueue(ctx, []byte("price crossed 100"), prioq.StartBy(time.Now().Add(10*time.Millisecond)))
	time.Sleep(50 * time.Millisecond) // nobody took it in time
	q.Enqueue(ctx, []byte("price crossed 110"), prioq.MaxWait(time.Minute))
	cons, err := q.NewConsumer(prioq.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer cons.Close(ctx)
	m, _ := cons.Receive(ctx)
	fmt.Println("runs:", string(m.Payload))
	m.Ack(ctx)
	dead, _ := q.DeadLetters(ctx, 0, 10)
	fmt.Println("dead:", string(dead[0].Payload), strings.HasPrefix(dead[0].Reason, "expired: not started by"))
	// Output:
	// runs: price crossed 110
	// dead: price crossed 100 true
}
