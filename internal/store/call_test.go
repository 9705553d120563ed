package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/mediocregopher/radix/v4/resp/resp3"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// isReply tells an error reply of Redis (the call was answered) from any
// other error.
func TestIsReply(t *testing.T) {
	assert.True(t, isReply(resp3.SimpleError{S: "OOM command not allowed"}))
	assert.True(t, isReply(resp3.BlobError{B: []byte("ERR x")}))
	assert.True(t, isReply(fmt.Errorf("prioq: enqueue: %w", resp3.SimpleError{S: "WRONGTYPE"})))
	assert.False(t, isReply(nil))
	assert.False(t, isReply(errors.New("ERR looks like a reply")))
	assert.False(t, isReply(context.DeadlineExceeded))
	assert.False(t, isReply(fmt.Errorf("%w: %w", errAbandoned, context.DeadlineExceeded)))
}

func TestDoBounded(t *testing.T) {
	t.Run("a ctx without deadline gets the timeout", func(t *testing.T) {
		var deadline time.Time
		var had bool
		c := clientFunc(func(ctx context.Context, _ radix.Action) error {
			deadline, had = ctx.Deadline()
			return nil
		})
		start := time.Now()
		require.NoError(t, doBounded(context.Background(), c, time.Minute, nil))
		require.True(t, had)
		assert.GreaterOrEqual(t, deadline.Sub(start), time.Minute)
		assert.Less(t, deadline.Sub(start), time.Minute+time.Second)
	})
	t.Run("a ctx deadline is kept", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		want, _ := ctx.Deadline()
		var got time.Time
		c := clientFunc(func(ctx context.Context, _ radix.Action) error { got, _ = ctx.Deadline(); return nil })
		require.NoError(t, doBounded(ctx, c, time.Second, nil))
		assert.True(t, got.Equal(want), "deadline %v, want %v", got, want)
	})
	t.Run("the call's error", func(t *testing.T) {
		boom := resp3.SimpleError{S: "ERR boom"}
		c := clientFunc(func(context.Context, radix.Action) error { return boom })
		assert.Equal(t, error(boom), doBounded(context.Background(), c, time.Second, nil))
	})
	t.Run("a late reply within the grace is kept", func(t *testing.T) {
		late := errors.New("late reply")
		c := clientFunc(func(ctx context.Context, _ radix.Action) error {
			<-ctx.Done()
			time.Sleep(abandonGrace / 5)
			return late
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		assert.Equal(t, late, doBounded(ctx, c, time.Second, nil))
	})
	t.Run("a call that ignores its ctx is abandoned", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		c := clientFunc(func(context.Context, radix.Action) error { <-release; return nil })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := doBounded(ctx, c, time.Second, nil)
		took := time.Since(start)
		assert.ErrorIs(t, err, errAbandoned)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.False(t, isReply(err))
		assert.GreaterOrEqual(t, took, 10*time.Millisecond+abandonGrace)
		assert.Less(t, took, 10*time.Millisecond+abandonGrace+time.Second)
	})
}
