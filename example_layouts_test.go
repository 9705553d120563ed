package prioq_test

import (
	"context"
	"fmt"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// Range takes any integer priority in [lo, hi] (up to ±2^53): higher is
// served first, and equal priorities first in, first out.
func ExampleRange() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-deadlines", prioq.Config{Layout: prioq.Range(-1_000_000, 1_000_000, 16)})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	for _, p := range []int64{-5, 250_000, 3, 250_000} {
		q.Enqueue(ctx, []byte(fmt.Sprint("job at ", p)), prioq.Priority(p))
	}

	peek, _ := q.Peek(ctx, 10)
	for _, m := range peek {
		fmt.Print(m.Priority, " ")
	}
	fmt.Println()
	// Output:
	// 250000 250000 3 -5
}
