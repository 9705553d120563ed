package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// Bad input reaching Redis in Docker: each is a clear error and leaves the
// rest of the queue working.
func TestBadInputAtTheBoundary(t *testing.T) {
	redis := sharedRedis(t)
	leakCheck(t)
	cl := newPool(t, redis.Addr, 16)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("mismatched config", func(t *testing.T) {
		name := queueName(t)
		_, err := prioq.Open(ctx, cl, name, prioq.Config{Layout: prioq.Levels(3)})
		require.NoError(t, err)
		_, err = prioq.Open(ctx, cl, name, prioq.Config{Layout: prioq.Range(0, 2, 3)})
		assert.ErrorIs(t, err, prioq.ErrConfigMismatch)
		_, err = prioq.Open(ctx, cl, name, prioq.Config{Layout: prioq.Levels(3), Mode: prioq.AtMostOnce})
		assert.ErrorIs(t, err, prioq.ErrConfigMismatch)
	})

	t.Run("lane key of the wrong type", func(t *testing.T) {
		name := queueName(t)
		q, err := prioq.Open(ctx, cl, name, prioq.Config{Layout: prioq.Levels(3)})
		require.NoError(t, err)
		require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "SET", "prioq:{"+name+"}:lane:2", "not a list")))
		_, err = q.Enqueue(ctx, []byte("x"), prioq.Priority(2))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "WRONGTYPE")
		// The other lanes still work: takes pass the broken lane by (and
		// the queue's logger says so), Stats fails loudly until it is mended.
		id, err := q.Enqueue(ctx, []byte("y"), prioq.Priority(0))
		require.NoError(t, err)
		cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
		require.NoError(t, err)
		defer cons.Close(ctx)
		m, err := cons.Receive(ctx)
		require.NoError(t, err)
		assert.Equal(t, id, m.ID)
		require.NoError(t, m.Ack(ctx))
		_, err = q.Stats(ctx)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "WRONGTYPE")
		require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "DEL", "prioq:{"+name+"}:lane:2")))
		top, err := q.Enqueue(ctx, []byte("z"), prioq.Priority(2))
		require.NoError(t, err, "the mended lane takes messages again")
		m, err = cons.Receive(ctx)
		require.NoError(t, err)
		assert.Equal(t, top, m.ID)
		require.NoError(t, m.Ack(ctx))
	})

	t.Run("garbage bytes in a lane", func(t *testing.T) {
		for _, mode := range []prioq.Mode{prioq.AtLeastOnce, prioq.AtMostOnce} {
			name := queueName(t)
			q, err := prioq.Open(ctx, cl, name, prioq.Config{Layout: prioq.Levels(3), Mode: mode})
			require.NoError(t, err)
			require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "RPUSH", "prioq:{"+name+"}:lane:2", "\x00\xffgarbage")))
			id, err := q.Enqueue(ctx, []byte("good"), prioq.Priority(1))
			require.NoError(t, err)
			var reported []error
			cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true, OnError: func(err error) { reported = append(reported, err) }})
			require.NoError(t, err)
			m, err := cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, id, m.ID, "the consumer skipped the garbage and kept going")
			if mode == prioq.AtLeastOnce {
				require.NoError(t, m.Ack(ctx))
				dead, err := q.DeadLetters(ctx, 0, 10)
				require.NoError(t, err)
				require.Len(t, dead, 1)
				assert.Contains(t, dead[0].Reason, "corrupt")
				assert.Equal(t, []byte("\x00\xffgarbage"), dead[0].Raw)
			} else {
				require.Len(t, reported, 1, "at-most-once has no dead letters: the drop is reported")
				assert.ErrorIs(t, reported[0], prioq.ErrCorrupt)
			}
			require.NoError(t, cons.Close(ctx))
		}
	})

	t.Run("oversized payload", func(t *testing.T) {
		q, err := prioq.Open(ctx, cl, queueName(t), prioq.Config{MaxPayload: 1024})
		require.NoError(t, err)
		_, err = q.Enqueue(ctx, make([]byte, 1025))
		assert.ErrorIs(t, err, prioq.ErrPayloadTooLarge)
		n, err := q.Len(ctx)
		require.NoError(t, err)
		assert.Zero(t, n)
	})

	t.Run("wrong password", func(t *testing.T) {
		secured := ownRedis(t, "--requirepass", "right-password")
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := radix.PoolConfig{Size: 1, Dialer: radix.Dialer{AuthPass: "wrong"}}.New(dctx, "tcp", secured.Addr)
		require.Error(t, err)
		assert.True(t, strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), "invalid"), err.Error())
		// No password at all: the pool connects, every call says NOAUTH.
		c, err := radix.PoolConfig{Size: 1}.New(dctx, "tcp", secured.Addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = prioq.Open(dctx, c, "q", prioq.Config{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "NOAUTH")
		// The right one works.
		ok, err := radix.PoolConfig{Size: 1, Dialer: radix.Dialer{AuthPass: "right-password"}}.New(dctx, "tcp", secured.Addr)
		require.NoError(t, err)
		defer ok.Close()
		_, err = prioq.Open(dctx, ok, "q", prioq.Config{})
		assert.NoError(t, err)
	})
}
