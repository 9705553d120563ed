package consume

import (
	"context"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// send stores one ready message of id on s's lowest lane.
func send(t *testing.T, s *store.Shard, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	env := (&store.Envelope{ID: id, Payload: []byte("p")}).Encode()
	res, err := s.Send(ctx, []store.Item{{ID: id, Env: env}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
}

// A Receive that gives up leaves its fetch running; what the fetch takes is
// held (the Fetched signal says when, no sleeping) and handed out, the same
// delivery, to the next Receive; after Close, Receive says ErrClosed.
func TestFetcherKeepsWhatAnAbandonedFetchTook(t *testing.T) {
	s := newShard(t)
	bg, stop := context.WithCancel(context.Background())
	defer stop()
	fetched := make(chan struct{}, 1)
	opts := FetchOptions{Lease: 10 * time.Second, BlockTimeout: 5 * time.Second, Fetched: fetched}
	f := NewFetcher(NewShardSource(s, opts, bg, func(err error) { t.Errorf("reported: %v", err) }), opts, bg,
		func(err error) { t.Errorf("reported: %v", err) })
	require.False(t, PopsLanes(f.Source()), "an AtLeastOnce fetch waits on the wake-up")

	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	_, err := f.Receive(short, 1)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	send(t, s, "a")
	waitSignal(t, fetched, 5*time.Second, "fetch")
	held, running, closed := f.State()
	require.Equal(t, 1, held)
	require.False(t, running || closed)
	token := f.Held()[0].Token()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ds, err := f.Receive(ctx, 5)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	assert.Equal(t, "a", ds[0].ID)
	assert.Equal(t, token, ds[0].Token(), "the delivery the fetch took, handed out as it is")

	_, first := f.Close()
	assert.True(t, first)
	_, err = f.Receive(ctx, 1)
	assert.ErrorIs(t, err, store.ErrClosed)
	_, first = f.Close()
	assert.False(t, first, "Close twice: the second does nothing")
}
