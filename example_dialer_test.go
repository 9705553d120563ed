package prioq_test

import (
	"context"
	"fmt"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
)

// Use prioq.Dialer for the pools prioq runs on: it lets the pool drop a
// connection whose peer vanished without a reset (a half-open connection).
// Auth and database settings go in DialerConfig.Base.
func ExampleDialer() {
	ctx := context.Background()
	client, err := radix.PoolConfig{
		Size:   8,
		Dialer: prioq.Dialer(prioq.DialerConfig{}),
	}.New(ctx, "tcp", redisAddr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	q, err := prioq.Open(ctx, client, "example-dialer", prioq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Purge(ctx)
	q.Enqueue(ctx, []byte("hello"))
	n, err := q.Len(ctx)
	fmt.Println(n, err)
	// Output:
	// 1 <nil>
}
