package prioq

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/require"
)

// Tests of the MultiConsumer's fixes of issue 29 (items 2, 10, 12, 13, 18,
// 22); its cluster item (6) is in integration/.

// aclUser creates an ACL user of its own with rules (beside "on" and a
// password), deleted when the test ends (the test Redis is shared), and
// returns a pool of size connections logged in as that user.
func aclUser(t *testing.T, size int, rules ...string) (user string, cl radix.Client) {
	t.Helper()
	admin := newClient(t)
	user = "u-" + strings.ReplaceAll(queueName(t), "/", "-")
	ctx := ctxT(t, 10*time.Second)
	args := append([]string{"SETUSER", user, "on", ">pw"}, rules...)
	require.NoError(t, admin.Do(ctx, radix.Cmd(nil, "ACL", args...)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = admin.Do(ctx, radix.Cmd(nil, "ACL", "DELUSER", user))
	})
	pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := radix.PoolConfig{Size: size, Dialer: radix.Dialer{AuthUser: user, AuthPass: "pw"}}.New(pctx, "tcp", testAddr)
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	require.NoError(t, cl.Do(pctx, radix.Cmd(nil, "PING")))
	return user, cl
}

// crossedReplies runs calls GETs of known keys at once on cl (8 at a time)
// and returns how many came back with another key's value or failed.
func crossedReplies(t *testing.T, cl radix.Client, calls int) (crossed int, sample []string) {
	t.Helper()
	admin := newClient(t)
	base := queueName(t)
	ctx := ctxT(t, 60*time.Second)
	for i := range 20 {
		require.NoError(t, admin.Do(ctx, radix.Cmd(nil, "SET", fmt.Sprintf("%s:k%d", base, i), fmt.Sprintf("v%d", i))))
	}
	t.Cleanup(func() {
		for i := range 20 {
			_ = admin.Do(context.Background(), radix.Cmd(nil, "DEL", fmt.Sprintf("%s:k%d", base, i)))
		}
	})
	var bad atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < calls; i += 8 {
				k := i % 20
				var got string
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := cl.Do(cctx, radix.Cmd(&got, "GET", fmt.Sprintf("%s:k%d", base, k)))
				cancel()
				if err != nil || got != fmt.Sprintf("v%d", k) {
					bad.Add(1)
					mu.Lock()
					if len(sample) < 3 {
						sample = append(sample, fmt.Sprintf("GET k%d: %q, %v", k, got, err))
					}
					mu.Unlock()
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return int(bad.Load()), sample
}

// countReports counts the reported errors that contain s.
func countReports(reported func() []string, s string) int {
	n := 0
	for _, e := range reported() {
		if strings.Contains(e, s) {
			n++
		}
	}
	return n
}

// An ordinary ACL user of Redis 7 (`+@all ~*`) has no channel permission
// (acl-pubsub-default resetchannels): every SSUBSCRIBE is refused with
// NOPERM. Before, the listener returned that error reply from its WithConn
// as it was, radix put the connection back into the pool, and the listener
// tried again every RetryInterval, each time reporting; with a channel
// allowed and a later one refused, a subscribed connection went back and
// callers read each other's replies. Now: no crossed reply, one report that
// says what to grant, and every queue served by the probe (Ack included).
func TestMultiConsumerUserWithoutChannelsCrossesNoReplies(t *testing.T) {
	_, cl := aclUser(t, 8, "~*", "+@all")
	qs := openMany(t, newClient(t), queueName(t), 3, Config{})
	onError, reported := errorLog()
	mc := newMulti(t, cl, MultiConfig{Queues: names(qs), ProbeInterval: 200 * time.Millisecond,
		Consumer: ConsumerConfig{RetryInterval: 20 * time.Millisecond, OnError: onError}})
	crossed, sample := crossedReplies(t, cl, 400)
	require.Zero(t, crossed, "GETs answered with another call's reply (or failed), e.g. %v", sample)

	ctx := ctxT(t, 20*time.Second)
	for i, q := range qs {
		_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)))
		require.NoError(t, err)
	}
	got := map[string]bool{}
	for range qs {
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		got[m.Queue()] = true
		require.NoError(t, m.Ack(ctx), "ack of a MultiConsumer whose user may not subscribe")
	}
	require.Len(t, got, 3, "every queue served by the probe")
	time.Sleep(200 * time.Millisecond) // ten RetryIntervals: a report each, before
	require.Equal(t, 1, countReports(reported, "may not subscribe"), "reported once: %q", reported())
	require.Equal(t, 1, countReports(reported, "&prioq:*"), "says what to grant: %q", reported())
	for _, e := range reported() {
		require.False(t, strings.Contains(e, "listening on"), "no other listener error: %q", reported())
	}
}

// The same user allowed the channel of one queue: that one is subscribed
// (and announced at once); a queue added later whose channel is refused is
// served by the probe. Before, the refused SSUBSCRIBE put the subscribed
// connection back in the pool: Enqueue and Stats calls failed with "Can't
// execute 'rpush'" or read an smessage as their reply.
func TestMultiConsumerRefusedLaterChannelCrossesNoReplies(t *testing.T) {
	admin := newClient(t)
	qs := openMany(t, admin, queueName(t), 2, Config{})
	allowed, refused := qs[0], qs[1]
	_, cl := aclUser(t, 8, "~*", "+@all", "resetchannels", "&"+sh(allowed).Keys().Wake())
	onError, reported := errorLog()
	mc := newMulti(t, cl, MultiConfig{Queues: []string{allowed.Name()}, ProbeInterval: time.Second,
		Consumer: ConsumerConfig{RetryInterval: 20 * time.Millisecond, OnError: onError}})
	require.Eventually(t, func() bool {
		var chans []string
		return admin.Do(context.Background(), radix.Cmd(&chans, "PUBSUB", "SHARDCHANNELS", sh(allowed).Keys().Wake())) == nil && len(chans) == 1
	}, 5*time.Second, 10*time.Millisecond, "the allowed channel is subscribed")
	ctx := ctxT(t, 60*time.Second)
	require.NoError(t, mc.Add(ctx, refused.Name()))

	// Enqueue and Stats of the user's own pool, at once, while the listener
	// meets the refusal.
	userQs := make([]*Queue, 2)
	for i, q := range qs {
		uq, err := OpenExisting(ctx, cl, q.Name(), Config{})
		require.NoError(t, err)
		userQs[i] = uq
	}
	var failed atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				q := userQs[(w+i)%2]
				var err error
				if i%2 == 0 {
					_, err = q.Enqueue(ctx, []byte("x"))
				} else {
					_, err = q.Stats(ctx)
				}
				if err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "of 400 Enqueue/Stats calls; first: %v", first.Load())
	crossed, sample := crossedReplies(t, cl, 200)
	require.Zero(t, crossed, "GETs answered with another call's reply (or failed), e.g. %v", sample)

	// Both queues drained: the refused one by the probe.
	count := map[string]int{}
	for range 200 {
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		count[m.Queue()]++
		require.NoError(t, m.Ack(ctx))
	}
	require.Equal(t, map[string]int{allowed.Name(): 100, refused.Name(): 100}, count)
	require.Equal(t, 1, countReports(reported, "may not subscribe"), "reported once: %q", reported())
	require.Contains(t, strings.Join(reported(), "\n"), refused.Name(), "names the queue refused")

	// The allowed queue is still heard at once (not at the next probe).
	start := time.Now()
	_, err := allowed.Enqueue(ctx, []byte("heard"))
	require.NoError(t, err)
	m, err := mc.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "heard", string(m.Payload))
	require.Less(t, time.Since(start), 500*time.Millisecond, "announced, not probed")
}

// Users without some pub/sub permission still use every operation: the
// announcements (SPUBLISH, in scripts by pcall and in the plain enqueue's
// pipeline) are hints whose refusal fails nothing; the MultiConsumer finds
// work by its probe and says once what is missing.
func TestQueuesWorkForUsersWithoutPubSubPermissions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rules  []string
		report string // what the MultiConsumer reports once ("" none)
		noPub  bool   // producers may not SPUBLISH: each queue logs it once
	}{
		{"NoChannels", []string{"~*", "+@all", "resetchannels"}, "&prioq:*", true},
		{"NoSPUBLISH", []string{"~*", "+@all", "-spublish", "allchannels"}, "", true},
		{"NoSSUBSCRIBE", []string{"~*", "+@all", "-ssubscribe", "allchannels"}, "SSUBSCRIBE", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, cl := aclUser(t, 16, tc.rules...)
			ctx := ctxT(t, 30*time.Second)
			var logs lockedBuffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			q, err := Open(ctx, cl, queueName(t), Config{Layout: Levels(3), Logger: logger})
			require.NoError(t, err)
			mq, err := Open(ctx, cl, queueName(t)+"-m", Config{Layout: Range(0, 99, 3), Logger: logger})
			require.NoError(t, err)

			// Producers: plain, batch, delayed, caller id.
			_, err = q.Enqueue(ctx, []byte("plain"), Priority(2))
			require.NoError(t, err)
			res, err := q.EnqueueBatch(ctx, []EnqueueItem{{Payload: []byte("b1")}, {Payload: []byte("b2"), Options: []Option{ID("b2")}}})
			require.NoError(t, err)
			for _, r := range res {
				require.NoError(t, r.Err)
			}
			_, err = q.Enqueue(ctx, []byte("later"), Delay(50*time.Millisecond))
			require.NoError(t, err)
			require.NoError(t, q.Pause(ctx))
			require.NoError(t, q.Resume(ctx))

			// A Consumer: take, retry, ack; promotion.
			c := newConsumer(t, q, ConsumerConfig{})
			seen := map[string]int{}
			for len(seen) < 4 || seen["b1"] < 2 { // "later" (due 50 ms after its enqueue) may come before b1 again
				m, err := c.Receive(ctx)
				require.NoError(t, err)
				seen[string(m.Payload)]++
				if m.Attempts == 1 && string(m.Payload) == "b1" {
					require.NoError(t, m.Retry(ctx, 10*time.Millisecond, "again"))
					continue
				}
				require.NoError(t, m.Ack(ctx))
			}
			require.Equal(t, map[string]int{"plain": 1, "b1": 2, "b2": 1, "later": 1}, seen)

			// A MultiConsumer.
			onError, reported := errorLog()
			mc := newMulti(t, cl, MultiConfig{Queues: []string{mq.Name()}, ProbeInterval: 200 * time.Millisecond,
				Consumer: ConsumerConfig{RetryInterval: 20 * time.Millisecond, OnError: onError}})
			for i := range 3 {
				_, err = mq.Enqueue(ctx, []byte(fmt.Sprint(i)), Priority(int64(i)))
				require.NoError(t, err)
				start := time.Now()
				m, err := mc.Receive(ctx)
				require.NoError(t, err)
				require.Equal(t, fmt.Sprint(i), string(m.Payload))
				require.Less(t, time.Since(start), 700*time.Millisecond, "found within a probe interval")
				require.NoError(t, m.Ack(ctx))
			}
			time.Sleep(200 * time.Millisecond)
			if tc.report == "" {
				require.Empty(t, reported())
			} else {
				require.Equal(t, 1, countReports(reported, "may not subscribe"), "reported once: %q", reported())
				require.Equal(t, 1, countReports(reported, tc.report), "says what to grant: %q", reported())
			}
			crossed, sample := crossedReplies(t, cl, 200)
			require.Zero(t, crossed, "e.g. %v", sample)
			logged := strings.Count(logs.String(), "may not announce work")
			if tc.noPub {
				require.Equal(t, 2, logged, "once per queue: %s", logs.String())
			} else {
				require.Zero(t, logged, "%s", logs.String())
			}
		})
	}
}

// shardSubscriber counts what is published on channel (a shard channel),
// from a connection of its own, until the test ends.
func shardSubscriber(t *testing.T, channel string) (count func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	conn, err := radix.Dial(dctx, "tcp", testAddr)
	require.NoError(t, err)
	var r []string
	require.NoError(t, conn.EncodeDecode(dctx, []string{"SSUBSCRIBE", channel}, &r))
	require.Equal(t, "ssubscribe", r[0])
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var r []string
			rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
			err := conn.EncodeDecode(rctx, nil, &r)
			rcancel()
			if err == nil && len(r) == 3 && r[0] == "smessage" {
				n.Add(1)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	return func() int { return int(n.Load()) }
}

// A MultiConsumer draining a queue announces nothing: its take claims the
// wake-up and puts it back, quietly, while work remains. Before, each such
// take announced the work again (298 SPUBLISH for 299 takes).
func TestMultiConsumerDrainAnnouncesNothing(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 60*time.Second)
	for _, tc := range threeLanes {
		t.Run(tc.name, func(t *testing.T) {
			q := openQueue(t, cl, Config{Layout: tc.layout})
			items := make([]EnqueueItem, 300)
			for i := range items {
				items[i] = EnqueueItem{Payload: []byte("x"), Options: []Option{Priority(int64(i % 3))}}
			}
			_, err := q.EnqueueBatch(ctx, items)
			require.NoError(t, err)
			heard := shardSubscriber(t, sh(q).Keys().Wake())
			mc := newMulti(t, cl, MultiConfig{Queues: []string{q.Name()}})
			for range 300 {
				m, err := mc.Receive(ctx)
				require.NoError(t, err)
				require.NoError(t, m.Ack(ctx))
			}
			n, err := q.Len(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
			time.Sleep(50 * time.Millisecond) // a last message on its way
			require.Zero(t, heard(), "announcements while one MultiConsumer drained 300 messages")
			// A new message after the drain is announced (once).
			_, err = q.Enqueue(ctx, []byte("new"))
			require.NoError(t, err)
			m, err := mc.Receive(ctx)
			require.NoError(t, err)
			require.NoError(t, m.Ack(ctx))
			require.Eventually(t, func() bool { return heard() == 1 }, time.Second, 5*time.Millisecond, "heard %d", heard())
		})
	}
}

// Weights are per queue: a queue of 4 shards, all with work, weighs its
// weight, not its weight times its ready shards. Equal weights, 400 takes:
// the 4-shard queue gets about half. Before, it got about 4/5 (149-165 of
// 200 in the review).
func TestMultiConsumerWeightsCountAQueueOnce(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 60*time.Second)
	base := queueName(t)
	wide, err := Open(ctx, cl, base+"-wide", Config{Shards: 4})
	require.NoError(t, err)
	narrow, err := Open(ctx, cl, base+"-narrow", Config{})
	require.NoError(t, err)
	for _, q := range []*Queue{wide, narrow} {
		items := make([]EnqueueItem, 1000)
		for i := range items {
			items[i] = EnqueueItem{Payload: []byte("x")}
		}
		_, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
	}
	for i, s := range wide.shards {
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		require.Greater(t, st.Ready, int64(150), "shard %d keeps work for all 400 takes", i)
	}
	mc := newMulti(t, cl, MultiConfig{Queues: []string{wide.Name(), narrow.Name()},
		Weights: map[string]int{wide.Name(): 1, narrow.Name(): 1}})
	mc.m.eng.SetIntN(newRand(t).IntN) // seeded, logged (set before the first Receive starts the fetcher)
	count := map[string]int{}
	for range 400 {
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		count[m.Queue()]++
		require.NoError(t, m.Ack(ctx))
	}
	t.Logf("takes: %v", count)
	// Expected 200 (sd 10) now, 320 (sd 8) before: the bound is 5 sd from
	// the one and 8.5 from the other.
	require.True(t, count[wide.Name()] >= 150 && count[wide.Name()] <= 250, "counts %v", count)
}

// A MultiConsumer puts back the meta key of a queue it serves when a restart
// without persistence lost it (here: DEL), as a Consumer's sweeper does; a
// MultiConsumer started afterwards then finds the queue, by name and by
// Pattern. Before, nothing put it back: a later MultiConsumer naming the
// queue failed with ErrNotFound, and one with a Pattern found nothing.
func TestMultiConsumerPutsBackALostMetaKey(t *testing.T) {
	cl := newClient(t)
	base := queueName(t)
	qs := []*Queue{}
	for i, cfg := range []Config{{Layout: Levels(3)}, {Layout: Range(-50, 50, 4), Shards: 2}} {
		q, err := Open(context.Background(), cl, fmt.Sprintf("%s-%d", base, i), cfg)
		require.NoError(t, err)
		qs = append(qs, q)
	}
	mc := newMulti(t, cl, MultiConfig{Queues: names(qs), ProbeInterval: 300 * time.Millisecond})
	ctx := ctxT(t, 20*time.Second)
	<-mc.m.eng.Started() // its first probe round (which reads the meta keys) is done: the next is 6 rounds away
	var meta [][]string
	for _, q := range qs {
		var m []string
		require.NoError(t, cl.Do(ctx, radix.Cmd(&m, "HGETALL", sh(q).Keys().Meta())))
		meta = append(meta, m)
		require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "DEL", sh(q).Keys().Meta())))
	}
	other, err := NewMultiConsumer(ctx, cl, MultiConfig{Queues: names(qs)})
	if err == nil {
		_ = other.Close(ctx)
	}
	require.ErrorIs(t, err, ErrNotFound, "lost for now")
	require.Eventually(t, func() bool {
		for _, q := range qs {
			var n int
			if cl.Do(ctx, radix.Cmd(&n, "EXISTS", sh(q).Keys().Meta())) != nil || n == 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond, "the meta keys put back by the running MultiConsumer")
	for i, q := range qs {
		var m []string
		require.NoError(t, cl.Do(ctx, radix.Cmd(&m, "HGETALL", sh(q).Keys().Meta())))
		require.Equal(t, toMap(meta[i]), toMap(m), "as it was")
	}
	// A consumer restarted now finds them, by name and by Pattern.
	require.NoError(t, mc.Close(ctx))
	byName := newMulti(t, cl, MultiConfig{Queues: names(qs)})
	require.Equal(t, names(qs), byName.Queues())
	byPattern := newMulti(t, cl, MultiConfig{Pattern: base + "-*"})
	require.Equal(t, names(qs), byPattern.Queues())
	_, err = qs[1].Enqueue(ctx, []byte("after"), Priority(7))
	require.NoError(t, err)
	m, err := byName.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "after", string(m.Payload))
	require.NoError(t, m.Ack(ctx))
}

func toMap(kv []string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// Strict order holds from the first take: 8 queues with ready messages and
// due delayed ones when the MultiConsumer starts; the first message is the
// first queue's every time. Before, the probe marked the queues ready one by
// one with a promotion round trip between, in map order: the first message
// came from a later queue in 7-8 of 10 trials.
func TestMultiConsumerStrictOrderAtStart(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 60*time.Second)
	for trial := range 10 {
		qs := openMany(t, cl, fmt.Sprintf("%s-%d", queueName(t), trial), 8, Config{Layout: Levels(3)})
		for _, q := range qs {
			_, err := q.Enqueue(ctx, []byte(q.Name()), Priority(1))
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte(q.Name()+"/delayed"), Priority(2), Delay(10*time.Millisecond))
			require.NoError(t, err)
		}
		time.Sleep(30 * time.Millisecond) // the delayed ones are due, not promoted
		mc, err := NewMultiConsumer(ctx, cl, MultiConfig{Queues: names(qs)})
		require.NoError(t, err)
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, qs[0].Name(), m.Queue(), "trial %d: the first message (%s) is the first queue's", trial, m.Payload)
		require.NoError(t, m.Ack(ctx))
		require.NoError(t, mc.Close(ctx))
	}
}

// Work whose wake-up a killed consumer took (it popped the member, then
// died before its take) is found within one ProbeInterval, as the README
// says of missed announcements. Before, only every 5th probe read the lanes:
// up to 5 ProbeIntervals. The listener's connection is killed first (it
// comes back after RetryInterval, 30 s here), so the probe is the only way
// the MultiConsumer learns of work.
func TestMultiConsumerFindsWorkWithoutWakeUpWithinAProbeInterval(t *testing.T) {
	cl := newClient(t)
	q := openQueue(t, cl, Config{})
	const probe = 300 * time.Millisecond
	mc := newMulti(t, cl, MultiConfig{Queues: []string{q.Name()}, ProbeInterval: probe,
		Consumer: ConsumerConfig{RetryInterval: 30 * time.Second}})
	ctx := ctxT(t, 60*time.Second)
	require.Eventually(t, func() bool {
		var chans []string
		return cl.Do(ctx, radix.Cmd(&chans, "PUBSUB", "SHARDCHANNELS", sh(q).Keys().Wake())) == nil && len(chans) == 1
	}, 5*time.Second, 10*time.Millisecond, "subscribed")
	var killed int
	require.NoError(t, cl.Do(ctx, radix.Cmd(&killed, "CLIENT", "KILL", "TYPE", "pubsub")))
	require.GreaterOrEqual(t, killed, 1)
	var worst time.Duration
	for i := range 10 {
		_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)))
		require.NoError(t, err)
		var popped []string
		require.NoError(t, cl.Do(ctx, radix.Cmd(&popped, "ZPOPMIN", sh(q).Keys().Wake()))) // the killed consumer's pop
		start := time.Now()
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		took := time.Since(start)
		worst = max(worst, took)
		require.Equal(t, fmt.Sprint(i), string(m.Payload))
		require.NoError(t, m.Ack(ctx))
		t.Logf("trial %d: found after %v (wake-up popped: %v)", i, took.Round(time.Millisecond), len(popped) > 0)
		time.Sleep(time.Duration(i) * probe / 10) // start the next trial at another point of the round
	}
	require.Less(t, worst, probe+200*time.Millisecond, "the longest wait for work without a wake-up")
}

// readmeACL is the README's ACL for prioq's Redis user (section "ACL
// permissions"): its key patterns, its shard channels, its commands by
// category, TIME (which scripts call) and, optionally, CONFIG GET (Open's
// eviction check, which says so in the log when it is refused).
var readmeACL = []string{"resetkeys", "~prioq:*", "~prioq/*", "resetchannels", "&prioq:*", "&prioq/*",
	"-@all", "+@read", "+@write", "+@scripting", "+@pubsub", "+@transaction", "+@connection", "+time", "+config|get"}

// A user with exactly the README's permissions runs every kind of
// operation, MultiConsumer included, with nothing reported; without
// +config|get, Open says in the log that it could not check the eviction
// policy and goes on.
func TestREADMEACLPermissionsSuffice(t *testing.T) {
	for _, withConfig := range []bool{true, false} {
		t.Run(fmt.Sprintf("config=%v", withConfig), func(t *testing.T) {
			rules := readmeACL
			if !withConfig {
				rules = rules[:len(rules)-1]
			}
			_, cl := aclUser(t, 16, rules...)
			ctx := ctxT(t, 30*time.Second)
			var logs lockedBuffer
			cfg := Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			cfg.Layout = Levels(3)
			base := queueName(t)
			q, err := Open(ctx, cl, base, cfg)
			require.NoError(t, err)
			cfg.Layout, cfg.Shards = Range(0, 99, 4), 2
			sq, err := Open(ctx, cl, base+"-sharded", cfg)
			require.NoError(t, err)
			if withConfig {
				require.Empty(t, logs.String())
			} else {
				require.Contains(t, logs.String(), "could not read maxmemory-policy")
			}

			for _, qq := range []*Queue{q, sq} {
				_, err = qq.Enqueue(ctx, []byte("plain"), Priority(2))
				require.NoError(t, err)
				_, err = qq.Enqueue(ctx, []byte("grouped"), Priority(1), Group("tenant"))
				require.NoError(t, err)
				_, err = qq.Enqueue(ctx, []byte("later"), Delay(20*time.Millisecond), ID("later-"+qq.Name()))
				require.NoError(t, err)
				_, err = qq.EnqueueBatch(ctx, []EnqueueItem{{Payload: []byte("b")}})
				require.NoError(t, err)
				_, err = qq.Peek(ctx, 10)
				require.NoError(t, err)
				_, err = qq.Stats(ctx)
				require.NoError(t, err)
				require.NoError(t, qq.Pause(ctx))
				require.NoError(t, qq.Resume(ctx))
			}
			onError, reported := errorLog()
			c := newConsumer(t, q, ConsumerConfig{OnError: onError})
			for range 4 {
				m, err := c.Receive(ctx)
				require.NoError(t, err)
				require.NoError(t, m.Extend(ctx, time.Minute))
				if string(m.Payload) == "b" {
					require.NoError(t, m.Retry(ctx, 10*time.Millisecond, "once more"))
					m, err = c.Receive(ctx)
					require.NoError(t, err)
				}
				require.NoError(t, m.Ack(ctx))
			}
			mc := newMulti(t, cl, MultiConfig{Queues: []string{sq.Name()}, Consumer: ConsumerConfig{OnError: onError}})
			for range 4 {
				m, err := mc.Receive(ctx)
				require.NoError(t, err)
				require.NoError(t, m.Ack(ctx))
			}
			found, err := ListQueues(ctx, cl, base+"*")
			require.NoError(t, err)
			require.Equal(t, []string{q.Name(), sq.Name()}, found)
			require.Empty(t, reported())
			require.False(t, strings.Contains(logs.String(), "may not announce"), "%s", logs.String())
		})
	}
}
