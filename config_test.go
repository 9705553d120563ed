package prioq

import (
	"context"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func TestConsumerConfigWithDefaults(t *testing.T) {
	alo := ConsumerConfig{}.withDefaults(AtLeastOnce)
	assert.Equal(t, 1, alo.Concurrency)
	assert.Equal(t, 30*time.Second, alo.Lease)
	assert.Equal(t, 5*time.Second, alo.BlockTimeout)
	assert.Equal(t, 30*time.Second, alo.PromoteWait)
	assert.Equal(t, 10*time.Second, alo.SweepInterval, "Lease/2 is longer")
	assert.Equal(t, 30*time.Second, alo.GracePeriod)
	assert.Equal(t, 500*time.Millisecond, alo.RetryInterval)
	assert.Equal(t, 2*time.Second, ConsumerConfig{}.withDefaults(AtMostOnce).BlockTimeout,
		"Close of an AtMostOnce consumer waits for its pop: a shorter block")

	short := ConsumerConfig{Lease: 4 * time.Second}.withDefaults(AtLeastOnce)
	assert.Equal(t, 2*time.Second, short.SweepInterval, "half the lease when that is shorter")
	set := ConsumerConfig{Concurrency: 3, Lease: 4 * time.Second, SweepInterval: 20 * time.Second,
		BlockTimeout: time.Second, GracePeriod: -1}.withDefaults(AtMostOnce)
	assert.Equal(t, 3, set.Concurrency)
	assert.Equal(t, 20*time.Second, set.SweepInterval, "a set interval is kept")
	assert.Equal(t, time.Second, set.BlockTimeout)
	assert.Equal(t, 30*time.Second, set.GracePeriod)
}

// A duration below MinDuration is refused where it is configured: a
// 30 ns lease made the sweeper spin (thousands of sweeps in 300 ms).
func TestTinyDurationsAreRefused(t *testing.T) {
	c := newClient(t)
	q := openQueue(t, c, Config{})
	for _, d := range []time.Duration{30, 5 * time.Millisecond} {
		for name, cfg := range map[string]ConsumerConfig{
			"Lease": {Lease: d}, "BlockTimeout": {BlockTimeout: d}, "PromoteWait": {PromoteWait: d},
			"SweepInterval": {SweepInterval: d}, "GracePeriod": {GracePeriod: d}, "RetryInterval": {RetryInterval: d},
		} {
			cons, err := q.NewConsumer(cfg)
			if !assert.ErrorIs(t, err, ErrInvalidOption, "%s %v", name, d) {
				_ = cons.Close(context.Background())
			}
		}
		for name, cfg := range map[string]Config{"CallTimeout": {CallTimeout: d}, "WaitTimeout": {WaitTimeout: d}} {
			_, err := Open(context.Background(), c, queueName(t), cfg)
			assert.ErrorIs(t, err, ErrInvalidOption, "%s %v", name, d)
			_, err = OpenExisting(context.Background(), c, q.Name(), cfg)
			assert.ErrorIs(t, err, ErrInvalidOption, "OpenExisting, %s %v", name, d)
		}
	}
	ctx := ctxT(t, 10*time.Second)
	_, err := q.Enqueue(ctx, []byte("x"))
	require.NoError(t, err)
	got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
	require.NoError(t, err)
	assert.ErrorIs(t, got[0].Extend(ctx, 30), ErrInvalidOption)
	conn, err := Dialer(DialerConfig{KeepAlive: 5 * time.Millisecond}).CustomConn(ctx, "tcp", testAddr)
	if !assert.ErrorIs(t, err, ErrInvalidOption, "Dialer") {
		conn.Close()
	}
}

// Mode.String is stored in the meta key, like Layout.String.
func TestModeString(t *testing.T) {
	assert.Equal(t, "at-least-once", AtLeastOnce.String())
	assert.Equal(t, "at-most-once", AtMostOnce.String())
	assert.Equal(t, "mode(9)", Mode(9).String())
	assert.Equal(t, AtLeastOnce, Config{}.Mode, "the zero Mode is AtLeastOnce")
}

func TestConfigWithDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	assert.Equal(t, Levels(3), c.Layout)
	assert.Equal(t, 512<<10, c.MaxPayload)
	assert.Equal(t, 10, c.MaxAttempts)
	assert.Equal(t, 256, c.PromoteBatch)
	assert.Equal(t, 10*time.Second, c.CallTimeout)
	assert.Equal(t, time.Second, c.WaitTimeout)
	assert.Zero(t, c.WaitReplicas)
	assert.NotZero(t, c.Logger)
	require.NotZero(t, c.Backoff)
	d := c.Backoff(1) // ExponentialBackoff(1s, 1h)
	assert.GreaterOrEqual(t, d, 500*time.Millisecond)
	assert.Less(t, d, time.Second)

	neg := Config{MaxPayload: -1, MaxAttempts: -1, PromoteBatch: -1, CallTimeout: -1, WaitTimeout: -1}.withDefaults()
	assert.Equal(t, c.MaxPayload, neg.MaxPayload)
	assert.Equal(t, c.MaxAttempts, neg.MaxAttempts)
	assert.Equal(t, c.PromoteBatch, neg.PromoteBatch)
	assert.Equal(t, c.CallTimeout, neg.CallTimeout)
	assert.Equal(t, c.WaitTimeout, neg.WaitTimeout)

	set := Config{Layout: Range(0, 9, 2), MaxPayload: 5, MaxAttempts: 2, PromoteBatch: 7,
		CallTimeout: time.Minute, WaitTimeout: 3 * time.Second}.withDefaults()
	assert.Equal(t, Range(0, 9, 2), set.Layout)
	assert.Equal(t, 5, set.MaxPayload)
	assert.Equal(t, 2, set.MaxAttempts)
	assert.Equal(t, 7, set.PromoteBatch)
	assert.Equal(t, time.Minute, set.CallTimeout)
	assert.Equal(t, 3*time.Second, set.WaitTimeout)
}

// A negative number or duration in a config is refused before anything is
// written (0 selects the default; nothing below it means anything). Before:
// Open(Shards: -3) made a queue of one shard, and every other negative field
// silently took its default.
func TestOpenRefusesNegativeFieldsWritingNothing(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"Shards", Config{Shards: -3}},
		{"MaxPayload", Config{MaxPayload: -1}},
		{"MaxAttempts", Config{MaxAttempts: -2}},
		{"PromoteBatch", Config{PromoteBatch: -5}},
		{"WaitReplicas", Config{WaitReplicas: -1}},
		{"CallTimeout", Config{CallTimeout: -time.Second}},
		{"WaitTimeout", Config{WaitTimeout: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := queueName(t)
			_, err := Open(ctx, c, name, tc.cfg)
			require.ErrorIs(t, err, ErrInvalidOption)
			assert.ErrorContains(t, err, tc.name)
			for _, pattern := range []string{"prioq:{" + name + "}*", "prioq/*:{" + name + "/*"} {
				var keys []string
				require.NoError(t, c.Do(ctx, radix.Cmd(&keys, "KEYS", pattern)))
				assert.Empty(t, keys, "no key written")
			}
		})
	}
	q := openQueue(t, c, Config{})
	for _, cc := range []ConsumerConfig{{Concurrency: -1}, {Lease: -time.Second}, {BlockTimeout: -1},
		{PromoteWait: -1}, {SweepInterval: -1}, {GracePeriod: -1}, {RetryInterval: -1}} {
		_, err := q.NewConsumer(cc)
		assert.ErrorIs(t, err, ErrInvalidOption, "%+v", cc)
	}
}

// A WaitTimeout under a millisecond was sent as "WAIT n 0", which waits
// forever: every write then took the whole CallTimeout. Open refuses it.
func TestSubMillisecondWaitTimeoutIsRefused(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	_, err := Open(ctx, newClient(t), queueName(t), Config{WaitReplicas: 1, WaitTimeout: 500 * time.Microsecond,
		CallTimeout: 2 * time.Second})
	assert.ErrorIs(t, err, ErrInvalidOption)

	// And should one get through, WAIT's timeout rounds up: 1 ms, not 0.
	cl := ownPool(t, ownServer(t), 4) // no replica
	q := openQueue(t, cl, Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond, CallTimeout: 2 * time.Second})
	q.cfg.WaitTimeout = 500 * time.Microsecond
	start := time.Now()
	_, err = q.Enqueue(ctx, []byte("x"))
	assert.ErrorIs(t, err, ErrNotReplicated)
	assert.Less(t, time.Since(start), 500*time.Millisecond)
}
