package prioq

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Delayed and in-flight messages can be browsed, a page at a time, in the
// order they will leave that state (due time; lease deadline), on every
// layout and on a queue of several shards; a damaged record is skipped and
// logged, and bad pages are refused.
func TestBrowseDelayedAndInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"Levels", Config{Layout: Levels(3)}},
		{"Range", Config{Layout: Range(0, 1000, 4)}},
		{"Sharded", Config{Layout: Levels(3), Shards: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			var logs lockedBuffer
			tc.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			q := openQueue(t, cl, tc.cfg)
			before := time.Now()
			for i, h := range []int{3, 1, 4, 2, 5} {
				_, err := q.Enqueue(ctx, []byte(fmt.Sprintf("d%d", h)), ID(fmt.Sprintf("delayed-%d", h)),
					Priority(int64(i%2)), Delay(time.Duration(h)*time.Hour))
				require.NoError(t, err)
			}
			page, err := q.Scheduled(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, page, 5)
			for i, m := range page {
				h := i + 1
				require.Equal(t, fmt.Sprintf("delayed-%d", h), m.ID)
				require.Equal(t, fmt.Sprintf("d%d", h), string(m.Payload))
				due := before.Add(time.Duration(h) * time.Hour)
				require.True(t, m.Due.After(due.Add(-time.Second)) && m.Due.Before(due.Add(5*time.Second)), "due %v, want about %v", m.Due, due)
			}
			page, err = q.Scheduled(ctx, 1, 2)
			require.NoError(t, err)
			require.Equal(t, []string{"delayed-2", "delayed-3"}, []string{page[0].ID, page[1].ID})
			page, err = q.Scheduled(ctx, 5, 2)
			require.NoError(t, err)
			require.Len(t, page, 0)

			// In flight: by lease deadline, an extended one last.
			for i := range 3 {
				_, err := q.Enqueue(ctx, []byte("now"), ID(fmt.Sprintf("ready-%d", i)))
				require.NoError(t, err)
			}
			c := newConsumer(t, q, ConsumerConfig{Lease: time.Minute, NoPromoter: true})
			msgs, err := c.ReceiveBatch(ctx, 3)
			require.NoError(t, err)
			for len(msgs) < 3 { // a sharded queue's batch may come from one shard
				more, err := c.ReceiveBatch(ctx, 3-len(msgs))
				require.NoError(t, err)
				msgs = append(msgs, more...)
			}
			require.NoError(t, msgs[0].Extend(ctx, 10*time.Minute))
			leased, err := q.Leased(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, leased, 3)
			require.Equal(t, msgs[0].ID, leased[2].ID, "the extended lease ends last")
			for _, l := range leased {
				require.True(t, strings.HasPrefix(l.ID, "ready-"), l.ID)
				require.Equal(t, 0, l.Attempts)
				require.True(t, time.Since(l.TakenAt) < 10*time.Second && l.LeaseDeadline.After(time.Now()), "%+v", l)
			}
			require.True(t, leased[2].LeaseDeadline.Sub(leased[0].LeaseDeadline) > 8*time.Minute)

			// A damaged delayed record: skipped, logged, the rest shown.
			s := q.shards[0]
			var field string
			for _, sh := range q.shards {
				var keys []string
				require.NoError(t, cl.Do(ctx, radix.Cmd(&keys, "HKEYS", sh.Keys().DStore())))
				if len(keys) > 0 {
					s, field = sh, keys[0]
					break
				}
			}
			require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "HSET", s.Keys().DStore(), field, "1|2|garbage")))
			page, err = q.Scheduled(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, page, 4)
			require.True(t, strings.Contains(logs.String(), "do not decode") && strings.Contains(logs.String(), field), "%s", logs.String())

			for _, bad := range [][2]int{{-1, 1}, {0, 0}} {
				_, err := q.Scheduled(ctx, bad[0], bad[1])
				require.ErrorIs(t, err, ErrInvalidOption)
				_, err = q.Leased(ctx, bad[0], bad[1])
				require.ErrorIs(t, err, ErrInvalidOption)
			}
		})
	}
}

// RunNow moves a delayed message to the ready ones at once, by itself (no
// promoter runs here), on every layout, with a group too; a second call, an
// unknown id or a cancelled message get ErrNotFound.
func TestRunNow(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		opts []Option
	}{
		{"Levels", Config{Layout: Levels(3)}, nil},
		{"Range", Config{Layout: Range(0, 1000, 4)}, nil},
		{"Sharded", Config{Layout: Levels(3), Shards: 3}, nil},
		{"Group", Config{Layout: Levels(3)}, []Option{Group("acme")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newClient(t)
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, cl, tc.cfg)
			c := newConsumer(t, q, ConsumerConfig{NoPromoter: true})
			for _, id := range []string{"soon", "later", "cancelled"} {
				opts := append([]Option{ID(id), Priority(1), Delay(time.Hour)}, tc.opts...)
				_, err := q.Enqueue(ctx, []byte(id), opts...)
				require.NoError(t, err)
			}
			require.NoError(t, q.RunNow(ctx, "soon"))
			rctx := ctxT(t, 5*time.Second)
			m, err := c.Receive(rctx)
			require.NoError(t, err)
			require.Equal(t, "soon", m.ID)
			require.NoError(t, m.Ack(ctx))
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(2), st.Delayed)
			require.ErrorIs(t, q.RunNow(ctx, "soon"), ErrNotFound)
			require.ErrorIs(t, q.RunNow(ctx, "nobody"), ErrNotFound)
			require.NoError(t, q.Cancel(ctx, "cancelled"))
			require.ErrorIs(t, q.RunNow(ctx, "cancelled"), ErrNotFound)
			require.ErrorIs(t, q.RunNow(ctx, ""), ErrInvalidID)
			page, err := q.Scheduled(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, page, 1)
			require.Equal(t, "later", page[0].ID)
		})
	}
}
