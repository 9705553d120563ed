package prioq_test

import (
	"context"
	"fmt"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// One MultiConsumer serves many queues on one connection per Redis node:
// Queues are served in their order (strict), then every queue matching
// Pattern; within a queue its priorities rule.
func ExampleNewMultiConsumer() {
	ctx := context.Background()
	client, err := radix.PoolConfig{Size: 8}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	// The queues must exist: Open them (or `prioq create`).
	for _, name := range []string{"example-tenant-vip", "example-tenant-a", "example-tenant-b"} {
		q, err := prioq.Open(ctx, client, name, prioq.Config{})
		if err != nil {
			panic(err)
		}
		defer q.Purge(ctx)
		q.Enqueue(ctx, []byte("report for "+name), prioq.Priority(1))
	}

	mc, err := prioq.NewMultiConsumer(ctx, client, prioq.MultiConfig{
		Queues:  []string{"example-tenant-vip"}, // first, always
		Pattern: "example-tenant-[ab]",          // then these, in name order
	})
	if err != nil {
		panic(err)
	}
	defer mc.Close(ctx)
	fmt.Println(mc.Queues())
	for i := 0; i < 3; i++ {
		m, err := mc.Receive(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(m.Queue(), string(m.Payload))
		m.Ack(ctx)
	}
	// Output:
	// [example-tenant-vip example-tenant-a example-tenant-b]
	// example-tenant-vip report for example-tenant-vip
	// example-tenant-a report for example-tenant-a
	// example-tenant-b report for example-tenant-b
}
