package prioq

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// A promotion that fails (here: the delayed store has the wrong type, as a
// Sentinel failover or a restarting primary fails it with other errors) must
// not leave the promoter computing its sleep from a server clock it never
// learned: the message is delivered soon after the fault clears. Before the
// fix, the failed call reset the learned clock to zero, and the next timeout
// of the marker wait armed a timer for decades.
func TestPromoterRecoversAfterFailedPromotion(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	q := openQueue(t, newClient(t), Config{Layout: Levels(1)})
	var errs atomic.Int64
	cons := newConsumer(t, q, ConsumerConfig{PromoteWait: 100 * time.Millisecond, RetryInterval: time.Second,
		OnError: func(error) { errs.Add(1) }})

	_, err := q.Enqueue(ctx, []byte("late"), ID("d1"), Delay(700*time.Millisecond))
	require.NoError(t, err)
	// Let the promoter learn the server's clock, then break the store.
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cons.Receive(rctx)
	cancel()
	require.Error(t, err, "nothing is due yet")
	backup := sh(q).k.dstore + ".backup"
	// Atomically, so that no promotion sees the store missing (see below).
	require.NoError(t, sh(q).c.Do(ctx, radix.NewEvalScript(
		`redis.call('RENAME', KEYS[1], KEYS[2]) redis.call('SET', KEYS[1], 'wrong type')`,
	).Cmd(nil, []string{sh(q).k.dstore, backup})))

	require.Eventually(t, func() bool { return errs.Load() > 0 }, 5*time.Second, 10*time.Millisecond,
		"the promotion at the due time fails")
	time.Sleep(500 * time.Millisecond) // several marker-wait timeouts while broken
	// One RENAME replaces the wrong-typed key atomically. (A DEL first would
	// let a promotion in between find the member without its record and drop
	// it as an orphan: CI once lost the message that way.)
	require.NoError(t, sh(q).c.Do(ctx, radix.Cmd(nil, "RENAME", backup, sh(q).k.dstore)))
	healed := time.Now()

	rctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := cons.Receive(rctx)
	require.NoError(t, err, "the due message is promoted once the fault clears")
	require.Equal(t, "d1", m.ID)
	require.NoError(t, m.Ack(ctx))
	t.Logf("delivered %v after the fault cleared (%d background errors)", time.Since(healed).Round(time.Millisecond), errs.Load())
}

// The promoter sleeps until the earliest due time; a message scheduled
// earlier than that must wake it, not wait for the old timer.
func TestPromoterWokenByEarlierMessage(t *testing.T) {
	c := newClient(t)
	for _, m := range bothModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			q := openQueue(t, c, Config{Mode: m.mode})
			_, err := q.Enqueue(ctx, []byte("late"), Delay(20*time.Second))
			require.NoError(t, err)
			// PromoteWait is long, so only the sched marker can wake it early.
			cons := newConsumer(t, q, ConsumerConfig{PromoteWait: 30 * time.Second})
			time.Sleep(200 * time.Millisecond) // the promoter is now asleep until +20s
			start := time.Now()
			id, err := q.Enqueue(ctx, []byte("early"), Delay(300*time.Millisecond))
			require.NoError(t, err)
			msg, err := cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, id, msg.ID)
			took := time.Since(start)
			assert.GreaterOrEqual(t, took, 300*time.Millisecond)
			assert.Less(t, took, 2*time.Second)
		})
	}
}
