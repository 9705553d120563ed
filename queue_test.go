package prioq

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenConfigMismatch(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	name := queueName(t)
	_, err := Open(ctx, c, name, Config{Layout: Levels(3)})
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"other levels", Config{Layout: Levels(4)}},
		{"range", Config{Layout: Range(0, 2, 1)}},
		{"other mode", Config{Layout: Levels(3), Mode: AtMostOnce}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(ctx, c, name, tc.cfg)
			assert.ErrorIs(t, err, ErrConfigMismatch)
		})
	}
	// The zero Config means Levels(3), AtLeastOnce: the same queue.
	_, err = Open(ctx, c, name, Config{})
	assert.NoError(t, err)
}

func TestOpenBadInput(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	for _, tc := range []struct {
		name    string
		qname   string
		cfg     Config
		wantErr error
	}{
		{"empty name", "", Config{}, ErrInvalidName},
		{"brace in name", "a{b", Config{}, ErrInvalidName},
		{"space in name", "a b", Config{}, ErrInvalidName},
		{"long name", string(bytes.Repeat([]byte("x"), 101)), Config{}, ErrInvalidName},
		{"zero levels", "ok", Config{Layout: Levels(0)}, ErrInvalidLayout},
		{"65 levels", "ok", Config{Layout: Levels(65)}, ErrInvalidLayout},
		{"lo > hi", "ok", Config{Layout: Range(5, 4, 1)}, ErrInvalidLayout},
		{"beyond 2^53", "ok", Config{Layout: Range(0, 1<<53+1, 4)}, ErrInvalidLayout},
		{"too many segments", "ok", Config{Layout: Range(0, 3, 5)}, ErrInvalidLayout},
		{"no segments", "ok", Config{Layout: Range(0, 3, 0)}, ErrInvalidLayout},
		{"bad mode", "ok", Config{Mode: Mode(9)}, ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.qname
			if name == "ok" {
				name = queueName(t)
			}
			_, err := Open(ctx, c, name, tc.cfg)
			require.ErrorIs(t, err, tc.wantErr)
			if name != "" && validateName(name) == nil {
				var n int
				require.NoError(t, c.Do(ctx, radix.Cmd(&n, "EXISTS", newKeySet(name, 1).meta)))
				assert.Zero(t, n, "a rejected Open wrote the meta key")
			}
		})
	}
}

func TestEnqueueBadInputWritesNothing(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			q := openQueue(t, c, Config{Layout: l.layout, MaxPayload: 16})
			bad := []struct {
				name    string
				payload []byte
				opts    []Option
				wantErr error
			}{
				{"priority above", []byte("x"), []Option{Priority(1001)}, ErrInvalidPriority},
				{"priority below", []byte("x"), []Option{Priority(-1001)}, ErrInvalidPriority},
				{"empty payload", nil, nil, ErrEmptyPayload},
				{"oversized payload", make([]byte, 17), nil, ErrPayloadTooLarge},
				{"empty id", []byte("x"), []Option{ID("")}, ErrInvalidID},
				{"id with space", []byte("x"), []Option{ID("a b")}, ErrInvalidID},
				{"long id", []byte("x"), []Option{ID(string(bytes.Repeat([]byte("i"), 129)))}, ErrInvalidID},
				{"negative delay", []byte("x"), []Option{Delay(-time.Second)}, ErrInvalidOption},
			}
			if l.layout.kind == kindLevels {
				bad[0].opts, bad[1].opts = []Option{Priority(5)}, []Option{Priority(-1)}
			}
			for _, b := range bad {
				_, err := q.Enqueue(ctx, b.payload, b.opts...)
				assert.ErrorIs(t, err, b.wantErr, b.name)
			}
			// A batch with one bad item stores none of the good ones.
			_, err := q.EnqueueBatch(ctx, []Item{{Payload: []byte("good")}, {Payload: nil}, {Payload: []byte("good")}})
			assert.ErrorIs(t, err, ErrEmptyPayload)
			assert.Empty(t, existingKeys(t, q))
		})
	}
}

func TestDuplicateID(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	for _, m := range bothModes {
		for _, l := range someLayouts {
			t.Run(m.name+"/"+l.name, func(t *testing.T) {
				q := openQueue(t, c, Config{Layout: l.layout, Mode: m.mode})
				id, err := q.Enqueue(ctx, []byte("a"), ID("order-1"))
				require.NoError(t, err)
				assert.Equal(t, "order-1", id)
				_, err = q.Enqueue(ctx, []byte("b"), ID("order-1"), Priority(3))
				assert.ErrorIs(t, err, ErrDuplicate)
				// Delayed duplicates are caught too, and a batch reports per item.
				res, err := q.EnqueueBatch(ctx, []Item{
					{Payload: []byte("c"), Options: []Option{ID("order-1"), Delay(time.Hour)}},
					{Payload: []byte("d"), Options: []Option{ID("order-2")}},
					{Payload: []byte("e"), Options: []Option{ID("order-2")}},
				})
				require.NoError(t, err)
				assert.ErrorIs(t, res[0].Err, ErrDuplicate)
				assert.NoError(t, res[1].Err)
				assert.ErrorIs(t, res[2].Err, ErrDuplicate)
				// Equal payloads without ids stay distinct messages.
				_, err = q.Enqueue(ctx, []byte("a"))
				require.NoError(t, err)
				_, err = q.Enqueue(ctx, []byte("a"))
				require.NoError(t, err)
				n, err := q.Len(ctx)
				require.NoError(t, err)
				assert.EqualValues(t, 4, n)

				// Once the message is done the id can be used again.
				cons := newConsumer(t, q, ConsumerConfig{})
				for i := 0; i < 4; i++ {
					msg, err := cons.Receive(ctx)
					require.NoError(t, err)
					if m.mode == AtLeastOnce {
						require.NoError(t, msg.Ack(ctx))
					}
				}
				_, err = q.Enqueue(ctx, []byte("again"), ID("order-1"))
				assert.NoError(t, err)
			})
		}
	}
}

func TestPeekStatsCancelPurge(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	for _, m := range bothModes {
		for _, l := range someLayouts {
			t.Run(m.name+"/"+l.name, func(t *testing.T) {
				q := openQueue(t, c, Config{Layout: l.layout, Mode: m.mode})
				prios := []int64{1, 4, 2, 4, 0}
				ids := make([]string, len(prios))
				for i, p := range prios {
					var err error
					ids[i], err = q.Enqueue(ctx, []byte{byte('a' + i)}, Priority(p))
					require.NoError(t, err)
				}
				delayedID, err := q.Enqueue(ctx, []byte("later"), Delay(time.Hour), Priority(3))
				require.NoError(t, err)

				peek, err := q.Peek(ctx, 3)
				require.NoError(t, err)
				require.Len(t, peek, 3)
				assert.Equal(t, []string{ids[1], ids[3], ids[2]}, []string{peek[0].ID, peek[1].ID, peek[2].ID})
				assert.Equal(t, []byte("b"), peek[0].Payload)

				st, err := q.Stats(ctx)
				require.NoError(t, err)
				assert.EqualValues(t, 5, st.Ready)
				assert.EqualValues(t, 1, st.Delayed)
				assert.Less(t, st.OldestReady, time.Minute)
				var sum int64
				for _, n := range st.Lanes {
					sum += n
				}
				assert.Equal(t, st.Ready, sum)

				require.NoError(t, q.Cancel(ctx, ids[3]))    // ready
				require.NoError(t, q.Cancel(ctx, delayedID)) // delayed
				assert.ErrorIs(t, q.Cancel(ctx, ids[3]), ErrNotFound)
				assert.ErrorIs(t, q.Cancel(ctx, "never-enqueued"), ErrNotFound)
				assert.ErrorIs(t, q.Cancel(ctx, "bad id"), ErrInvalidID)
				peek, err = q.Peek(ctx, 10)
				require.NoError(t, err)
				got := []string{}
				for _, p := range peek {
					got = append(got, p.ID)
				}
				assert.Equal(t, []string{ids[1], ids[2], ids[0], ids[4]}, got)

				n, err := q.Purge(ctx)
				require.NoError(t, err)
				assert.EqualValues(t, 4, n)
				total, err := q.Len(ctx)
				require.NoError(t, err)
				assert.Zero(t, total)
			})
		}
	}
}

func TestCancelledReceiveLosesNothing(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			q := openQueue(t, c, Config{Mode: m.mode})
			cons, err := q.NewConsumer(ConsumerConfig{BlockTimeout: 500 * time.Millisecond})
			require.NoError(t, err)
			// Receive on an empty queue gives up with the context...
			short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			start := time.Now()
			_, err = cons.Receive(short)
			cancel()
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Less(t, time.Since(start), 400*time.Millisecond, "Receive must return promptly on ctx done")
			// ...while its fetch may still be running; a message arriving now is
			// held for the next Receive or put back by Close, never dropped.
			ctx := ctxT(t, 10*time.Second)
			id, err := q.Enqueue(ctx, []byte("x"))
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond)
			require.NoError(t, cons.Close(ctx))
			_, err = cons.Receive(ctx)
			assert.ErrorIs(t, err, ErrClosed)

			cons2 := newConsumer(t, q, ConsumerConfig{})
			msg, err := cons2.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, id, msg.ID)
			if m.mode == AtLeastOnce {
				assert.Equal(t, 1, msg.Attempts, "a message given back on Close does not count an attempt")
				require.NoError(t, msg.Ack(ctx))
			}
		})
	}
}

func TestAckOnAtMostOnceMessage(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Mode: AtMostOnce})
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	cons := newConsumer(t, q, ConsumerConfig{})
	msg, err := cons.Receive(ctx)
	require.NoError(t, err)
	assert.ErrorIs(t, msg.Ack(ctx), ErrWrongMode)
	assert.ErrorIs(t, q.Pause(ctx), ErrWrongMode)
	assert.True(t, errors.Is(msg.Extend(ctx, time.Second), ErrWrongMode))
}

// Close with a ctx that ends before the AtMostOnce pop in progress: Close
// returns at once, and a message the pop takes afterwards is given back to
// its lane, not stranded.
func TestCloseBeforeAtMostOncePopEndsLosesNothing(t *testing.T) {
	c := newClient(t)
	q := openQueue(t, c, Config{Mode: AtMostOnce})
	cons, err := q.NewConsumer(ConsumerConfig{BlockTimeout: 2 * time.Second, NoPromoter: true})
	require.NoError(t, err)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = cons.Receive(short) // starts a pop that blocks for up to 2 s
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	closeCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	err = cons.Close(closeCtx)
	cancel()
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second)
	ctx := ctxT(t, 10*time.Second)
	id, err := q.Enqueue(ctx, []byte("arrives while the old pop still waits"))
	require.NoError(t, err)
	// The old pop takes it and, the consumer being closed, puts it back.
	require.Eventually(t, func() bool {
		st, err := q.Stats(ctx)
		return err == nil && st.Ready == 1
	}, 5*time.Second, 10*time.Millisecond)
	cons2 := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
	m, err := cons2.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, id, m.ID)
}

// Open refuses a server that may evict any key (allkeys-*): it deletes whole
// lanes while every Enqueue returns nil. volatile-* and noeviction are fine,
// and the caller can opt in. A server that denies CONFIG is let through with
// a log line.
func TestOpenRefusesUnsafeEviction(t *testing.T) {
	for _, tc := range []struct {
		policy string
		allow  bool
		want   error
	}{
		{"allkeys-lru", false, ErrUnsafeEviction},
		{"allkeys-random", false, ErrUnsafeEviction},
		{"allkeys-lfu", true, nil},
		{"volatile-lru", false, nil},
		{"noeviction", false, nil},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			addr := ownServer(t, "--maxmemory-policy", tc.policy)
			c := ownPool(t, addr, 2)
			name := queueName(t)
			_, err := Open(ctxT(t, 5*time.Second), c, name, Config{AllowEviction: tc.allow})
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				assert.ErrorContains(t, err, tc.policy)
				var n int
				require.NoError(t, c.Do(context.Background(), radix.Cmd(&n, "EXISTS", newKeySet(name, 3).meta)))
				assert.Zero(t, n, "a refused Open writes nothing")
			} else {
				require.NoError(t, err)
			}
		})
	}
	t.Run("CONFIG renamed", func(t *testing.T) {
		addr := ownServer(t, "--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "")
		c := ownPool(t, addr, 2)
		var log strings.Builder
		logger := slog.New(slog.NewTextHandler(&log, nil))
		_, err := Open(ctxT(t, 5*time.Second), c, queueName(t), Config{Logger: logger})
		require.NoError(t, err, "without CONFIG prioq cannot know: it says so and goes on")
		assert.Contains(t, log.String(), "could not read maxmemory-policy")
	})
}

// A restart without persistence loses the meta key while processes go on
// with queues they opened before: consumers put it back, so that Open still
// refuses a different configuration.
func TestMetaKeyComesBack(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: Levels(3), Mode: m.mode})
			newConsumer(t, q, ConsumerConfig{SweepInterval: 50 * time.Millisecond, PromoteWait: 100 * time.Millisecond})
			require.NoError(t, c.Do(ctx, radix.Cmd(nil, "DEL", q.k.meta)))
			require.Eventually(t, func() bool {
				var n int
				require.NoError(t, c.Do(ctx, radix.Cmd(&n, "EXISTS", q.k.meta)))
				return n == 1
			}, 5*time.Second, 20*time.Millisecond, "the meta key did not come back")
			_, err := Open(ctx, c, q.name, Config{Layout: Levels(5), Mode: m.mode})
			assert.ErrorIs(t, err, ErrConfigMismatch)
		})
	}
}
