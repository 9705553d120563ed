package prioq

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/consume"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Tests of the review of issue 29's fixes (b779e06..0e72dd4): each one fails
// on the code it names.

// A consumer of a queue of several shards whose workers are all busy (Run,
// Concurrency 1, work arriving faster than it is handled) and no delayed
// message anywhere. Item 7's fix made a parked waiter watch the sched set,
// with a poke key its consumer set at every fetch (ZADD + PEXPIRE, and the
// BZPOPMIN that pops it) per parked shard: 24.9 Redis commands per message
// against 19.4 on b779e06, a third more Redis time. A busy consumer now pokes
// a parked waiter at most once per pokeGap (a fetch that waits for work
// pokes at once): the pokes are bounded by time, not by messages, and a
// message costs no more commands than before item 7's fix.
func TestBusyShardedConsumerPaysNoPokePerFetch(t *testing.T) {
	addr := ownServer(t)
	cl := ownPool(t, addr, 32)
	ctx := ctxT(t, 60*time.Second)
	q, err := Open(ctx, cl, queueName(t), Config{Shards: 2})
	require.NoError(t, err)
	c := newConsumer(t, q, ConsumerConfig{Concurrency: 1})
	const n = 100
	var handled atomic.Int64
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	before := commandCalls(t, cl)
	start := time.Now()
	go func() {
		defer close(done)
		_ = c.Run(rctx, func(context.Context, *Message) error {
			time.Sleep(20 * time.Millisecond)
			handled.Add(1)
			return nil
		})
	}()
	for i := 0; i < n; i++ {
		_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)))
		require.NoError(t, err)
		time.Sleep(3 * time.Millisecond)
	}
	for handled.Load() < n {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	stop()
	<-done
	after := commandCalls(t, cl)
	var names []string
	total := 0
	for k, v := range after {
		if d := v - before[k]; d > 0 && k != "info" {
			names = append(names, fmt.Sprintf("%s=%d", k, d))
			total += d
		}
	}
	sort.Strings(names)
	t.Logf("%d messages: %v; %d commands, %.1f per message", n, names, total, float64(total)/n)
	pokes := after["pexpire"] - before["pexpire"]
	require.LessOrEqual(t, float64(pokes), 2*float64(took)/float64(consume.PokeGap)+4,
		"pokes (ZADD+PEXPIRE of poke:C) in %v on 2 shards, none delayed: at most one per PokeGap and shard", took)
	require.LessOrEqual(t, float64(total)/n, 20.0, "Redis commands per message (b779e06: 19.4; a poke per fetch: 24.9)")
}

// Issue 29 item 19's class: a negative number or duration must be refused
// with ErrInvalidOption, never taken for "unset" (the fix did Config and
// ConsumerConfig, config.go validateRaw/negatives). MultiConfig's own
// durations were left out: ProbeInterval -1 s and RescanInterval -1 s are
// silently replaced by their defaults (multi.go NewMultiConsumer: only
// minDurations, which passes a negative, then orDefault).
func TestMultiConfigNegativeDurationsAreRefused(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, cl, Config{})
	for _, cfg := range []MultiConfig{
		{Queues: []string{q.Name()}, ProbeInterval: -time.Second},
		{Queues: []string{q.Name()}, RescanInterval: -time.Second},
	} {
		mc, err := NewMultiConsumer(ctx, cl, cfg)
		if mc != nil {
			require.NoError(t, mc.Close(ctx))
		}
		require.ErrorIs(t, err, ErrInvalidOption, "ProbeInterval %v, RescanInterval %v", cfg.ProbeInterval, cfg.RescanInterval)
	}
}

// A Range queue of format 4 with a filled index (more than filledLanes
// segments) at maxmemory, whose best segment's index names its priority
// under the wrong score ("110" at -111, a hand edit: the damage item 8's fix
// mends). Takes must drain a full Redis (README fault table), as the fix's
// set-aside branch takes care to (ZREM first). The "named right, scored
// wrong" branch of pop_filled (take.lua, added by 42997d9) makes a ZADD the
// take's first write instead: Redis refuses it (OOM) at maxmemory, so every
// take of the queue fails while that member leads the index, and nothing is
// delivered. (pop_lists, without the filled index, pops first: it works.)
func TestFilledRangeTakeOfAMisscoredIndexNameAtMaxMemory(t *testing.T) {
	addr := ownServer(t, "--maxmemory-policy", "noeviction")
	c := ownPool(t, addr, 8)
	ctx := ctxT(t, 20*time.Second)
	layout := Range(-120, 119, 12)
	q := openQueue(t, c, Config{Layout: layout})
	s := sh(q)
	require.True(t, s.Filled(), "takes read the filled index")
	// A first take checks the index whole (FILLED_WHOLE), as on any
	// queue in use.
	_, err := q.Enqueue(ctx, []byte("first"), Priority(-110))
	require.NoError(t, err)
	r, err := takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute, guess: true})
	require.NoError(t, err)
	require.Len(t, r.msgs, 1)
	id, err := q.Enqueue(ctx, []byte("p110"), Priority(110))
	require.NoError(t, err)
	lane, _ := layout.l.LaneOf(110)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "ZADD", s.Keys().Lanes()[lane], "-111", "110")))

	setMaxMemory(t, c, usedMemory(t, c)-256<<10) // over the limit from here on
	t.Cleanup(func() { setMaxMemory(t, c, 0) })
	_, err = q.Enqueue(ctx, []byte("refused"), Priority(0))
	require.ErrorContains(t, err, "OOM", "Redis is full")

	r, err = takeFrom(s, ctx, takeArgs{lanes: s.Keys().HighFirst(), n: 1, lease: time.Minute, guess: true})
	require.NoError(t, err, "a take at maxmemory")
	require.Len(t, r.msgs, 1)
	require.Equal(t, id, r.msgs[0].ID)
}

// A Range index member that names no priority ("007") and a key under the
// name it gives (prio:007, "none of prioq's", which takes leave in place and
// every reader passes over since item 8's fix): Purge still builds prio:P
// from every index member (purge.lua: each_in over the index, no index_prio
// check), counts that foreign list's length as purged messages and deletes
// it. (TestRangeIndexDamageFailsNoOtherScript only asserts purged >= 1.)
func TestPurgeLeavesTheKeyADamagedIndexMemberNames(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Range(-10, 10, 3)})
	s := sh(q)
	foreign := s.Keys().Prefix() + "prio:007"
	_, err := q.Enqueue(ctx, []byte("m"), Priority(5))
	require.NoError(t, err)
	p := radix.NewPipeline()
	p.Append(radix.Cmd(nil, "RPUSH", foreign, "not prioq's", "nor this"))
	p.Append(radix.Cmd(nil, "ZADD", s.Keys().Lanes()[2], "-10", "007"))
	require.NoError(t, c.Do(ctx, p))
	purged, err := q.Purge(ctx)
	require.NoError(t, err)
	var left []string
	require.NoError(t, c.Do(ctx, radix.Cmd(&left, "LRANGE", foreign, "0", "-1")))
	require.Equal(t, []string{"not prioq's", "nor this"}, left, "the key the member names is left in place")
	require.Equal(t, int64(1), purged, "one message purged")
}
