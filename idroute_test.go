package prioq

import (
	"fmt"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// A caller's id is idempotent queue-wide (issue 29 item 4). On a queue of
// several shards a Group or an OrderingKey chooses the shard, while an id is
// kept unique by its shard's set of live ids: ID("job-1") with Group("g1"),
// then with Group("g2"), stored two messages on issue 29's base (both
// Enqueues nil), and so did two OrderingKeys. No atomic check can see every
// shard (their keys are in different cluster slots), so the combination is
// refused, writing nothing, for Enqueue and EnqueueBatch alike; a queue of
// one shard takes it, and the id stays idempotent there.
func TestIDIsIdempotentWhateverRoutesIt(t *testing.T) {
	c := newClient(t)
	routes := []struct {
		name string
		by   func(k string) Option
	}{{"Group", Group}, {"OrderingKey", OrderingKey}}
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: Levels(3), Shards: 2})
			// Two keys of different shards, so that the base stores twice.
			k1, k2 := "k1", ""
			for i := 2; k2 == ""; i++ {
				if k := fmt.Sprint("k", i); q.hashShard(k) != q.hashShard(k1) {
					k2 = k
				}
			}
			for _, k := range []string{k1, k2} {
				_, err := q.Enqueue(ctx, []byte("x"), ID("job-1"), r.by(k))
				assert.ErrorIs(t, err, ErrInvalidOption)
				if err != nil {
					assert.Contains(t, err.Error(), "ID with "+r.name+" on a queue of 2 shards")
				}
			}
			res, err := q.EnqueueBatch(ctx, []EnqueueItem{
				{Payload: []byte("fine"), Options: []Option{ID("job-2")}},
				{Payload: []byte("x"), Options: []Option{ID("job-1"), r.by(k2)}},
			})
			assert.ErrorIs(t, err, ErrInvalidOption, "the whole batch is refused")
			assert.Empty(t, res)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(0), st.Ready, "nothing written")

			// The id alone chooses its shard and is idempotent queue-wide;
			// Cancel and RequeueDead find it.
			_, err = q.Enqueue(ctx, []byte("x"), ID("job-1"))
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte("x"), ID("job-1"), Priority(2))
			assert.ErrorIs(t, err, ErrDuplicate)
			require.NoError(t, q.Cancel(ctx, "job-1"))
			_, err = q.Enqueue(ctx, []byte("x"), ID("job-1"))
			require.NoError(t, err)
			s := q.shards[q.shardOf("job-1")]
			msgs, _, err := shardTake(s, ctx, s.Keys().HighFirst(), 1, time.Minute)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			require.NoError(t, failTok(s, ctx, msgs[0].token(), 0, "dead", store.FailDead))
			require.NoError(t, q.RequeueDead(ctx, "job-1"))
			peek, err := q.Peek(ctx, 10)
			require.NoError(t, err)
			assert.Equal(t, []string{"job-1"}, infoIDs(peek))

			// One shard: both together work, and the id stays idempotent.
			one := openQueue(t, c, Config{Layout: Levels(3)})
			_, err = one.Enqueue(ctx, []byte("x"), ID("job-1"), r.by(k1))
			require.NoError(t, err)
			_, err = one.Enqueue(ctx, []byte("x"), ID("job-1"), r.by(k2))
			assert.ErrorIs(t, err, ErrDuplicate)
			res, err = one.EnqueueBatch(ctx, []EnqueueItem{{Payload: []byte("x"), Options: []Option{ID("job-3"), r.by(k2)}}})
			require.NoError(t, err)
			require.Len(t, res, 1)
			assert.NoError(t, res[0].Err)
		})
	}
}
