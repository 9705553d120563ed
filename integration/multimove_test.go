package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// A MultiConsumer's probe reads many queues of a node in one call. While one
// queue's slot is half moved (some of its keys on each node), reading its
// keys on the source fails ("non local key", even for a key that exists
// nowhere); the probe reads each key with a pcall and leaves that queue
// alone, so the other queues of the node are still swept and promoted.
// Before, the whole call failed every round: a second queue's expired lease
// was not swept until the slot was stable. Once the move is finished, the
// moved queue is served again, and the move itself was not hindered.
func TestMultiConsumerServesOtherQueuesWhileASlotIsHalfMoved(t *testing.T) {
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := c.client(ctx, 8)
	base := "halfmoved-" + strconv.FormatInt(time.Now().UnixNano(), 36)

	// Two queues in different slots of the same primary.
	a := c.primaries[0]
	var qs []*prioq.Queue
	for i := 0; len(qs) < 2; i++ {
		q, err := prioq.Open(ctx, cl, fmt.Sprintf("%s-%d", base, i), prioq.Config{Layout: prioq.Levels(3)})
		require.NoError(t, err)
		if q.ShardNodes()[0] == a.addr() && (len(qs) == 0 || qs[0].ShardSlots()[0] != q.ShardSlots()[0]) {
			qs = append(qs, q)
		}
	}
	moving, other := qs[0], qs[1]

	var mu sync.Mutex
	var reported []string
	onErr := func(err error) {
		mu.Lock()
		reported = append(reported, err.Error())
		mu.Unlock()
		t.Logf("background: %v", err)
	}
	mc, err := prioq.NewMultiConsumer(ctx, cl, prioq.MultiConfig{Queues: []string{other.Name(), moving.Name()},
		ProbeInterval: 200 * time.Millisecond,
		Consumer:      prioq.ConsumerConfig{Lease: 500 * time.Millisecond, OnError: onErr}})
	require.NoError(t, err)
	defer mc.Close(context.Background())
	receive := func(want string) *prioq.Message {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		m, err := mc.Receive(rctx)
		require.NoError(t, err, "waiting for %q", want)
		require.Equal(t, want, string(m.Payload))
		return m
	}

	// The moving queue holds ready and delayed messages.
	for i := range 3 {
		_, err := moving.Enqueue(ctx, []byte(fmt.Sprintf("later-%d", i)), prioq.Delay(time.Hour))
		require.NoError(t, err)
	}
	// The other queue: a message taken and never acked (its lease ends
	// during the move).
	_, err = other.Enqueue(ctx, []byte("leased"))
	require.NoError(t, err)
	held := receive("leased")

	// Half of the moving queue's keys go to the other node.
	b := c.primaries[1]
	move := c.openMove(moving.ShardSlots()[0], b)
	require.NotNil(t, move)
	var keys []string
	for _, k := range move.keysLeft(100) {
		if strings.HasSuffix(k, ":delayed") || strings.HasSuffix(k, ":dstore") {
			keys = append(keys, k)
		}
	}
	require.Len(t, keys, 2)
	require.NoError(t, move.migrate(false, keys...))
	require.NotEmpty(t, move.keysLeft(100), "half moved")
	moveStart := time.Now()

	// While it is half moved: the other queue's expired lease is swept
	// (found by the probe alone: no announcement of a lease's end), and a
	// delayed message of it is promoted when due.
	_, err = other.Enqueue(ctx, []byte("due"), prioq.Delay(700*time.Millisecond))
	require.NoError(t, err)
	got := map[string]*prioq.Message{}
	for range 2 {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := mc.Receive(rctx)
		rcancel()
		require.NoError(t, err, "have %v", got)
		got[string(m.Payload)] = m
		require.NoError(t, m.Ack(ctx))
	}
	require.Contains(t, got, "due", "promoted")
	require.Contains(t, got, "leased", "swept")
	require.Equal(t, held.ID, got["leased"].ID)
	require.Equal(t, 2, got["leased"].Attempts, "redelivered after its lease ended")
	t.Logf("swept and promoted %v into the half move", time.Since(moveStart).Round(time.Millisecond))
	require.NotEmpty(t, move.keysLeft(100), "still half moved")
	mu.Lock()
	for _, r := range reported {
		require.NotContains(t, r, "non local key", "the probe no longer fails whole")
	}
	mu.Unlock()

	// The move finishes (nothing wrote a key of the slot on the source
	// meanwhile), and the moved queue is served on its new node.
	move.finish()
	_, err = moving.Enqueue(ctx, []byte("after"), prioq.Priority(2))
	require.NoError(t, err)
	m := receive("after")
	require.NoError(t, m.Ack(ctx))
	st, err := moving.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Delayed, "its delayed messages moved whole")
}

// Strict order holds from the first take on a cluster too: 8 queues on two
// primaries (the first one alone on its node), each with ready messages and
// due delayed ones when the MultiConsumer starts; the first message is the
// first queue's every time. The probes of the nodes are separate calls: the
// first take waits for the first probe of every node (at most a
// ProbeInterval).
func TestMultiConsumerStrictOrderAtStartOnCluster(t *testing.T) {
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := c.client(ctx, 16)
	for trial := range 6 {
		base := fmt.Sprintf("strict-%s-%d", strconv.FormatInt(time.Now().UnixNano(), 36), trial)
		var first *prioq.Queue
		var rest []*prioq.Queue
		for i := 0; first == nil || len(rest) < 7; i++ {
			q, err := prioq.Open(ctx, cl, fmt.Sprintf("%s-%d", base, i), prioq.Config{Layout: prioq.Levels(3)})
			require.NoError(t, err)
			switch node := q.ShardNodes()[0]; {
			case first == nil && node == c.primaries[trial%2].addr():
				first = q
			case len(rest) < 7 && node == c.primaries[(trial+1)%2].addr():
				rest = append(rest, q)
			}
		}
		qs := append([]*prioq.Queue{first}, rest...)
		var names []string
		for _, q := range qs {
			names = append(names, q.Name())
			_, err := q.Enqueue(ctx, []byte(q.Name()), prioq.Priority(1))
			require.NoError(t, err)
			_, err = q.Enqueue(ctx, []byte(q.Name()+"/delayed"), prioq.Priority(2), prioq.Delay(10*time.Millisecond))
			require.NoError(t, err)
		}
		time.Sleep(30 * time.Millisecond)
		mc, err := prioq.NewMultiConsumer(ctx, cl, prioq.MultiConfig{Queues: names})
		require.NoError(t, err)
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, first.Name(), m.Queue(), "trial %d: the first message (%s) is the first queue's", trial, m.Payload)
		require.NoError(t, m.Ack(ctx))
		require.NoError(t, mc.Close(ctx))
	}
}

// On a cluster a MultiConsumer puts back lost meta keys too: that of a queue
// of one shard (in its slot, read by the probe) and that of a queue of
// several (in a slot of its own, maybe on another node), and a consumer
// started afterwards finds both by Pattern.
func TestMultiConsumerPutsBackLostMetaKeysOnCluster(t *testing.T) {
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := c.client(ctx, 8)
	base := "meta-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	one, err := prioq.Open(ctx, cl, base+"-one", prioq.Config{Layout: prioq.Levels(3)})
	require.NoError(t, err)
	three, err := prioq.Open(ctx, cl, base+"-three", prioq.Config{Layout: prioq.Range(0, 99, 4), Shards: 3})
	require.NoError(t, err)
	mc, err := prioq.NewMultiConsumer(ctx, cl, prioq.MultiConfig{Queues: []string{one.Name(), three.Name()},
		ProbeInterval: 100 * time.Millisecond, Consumer: prioq.ConsumerConfig{OnError: func(err error) { t.Logf("background: %v", err) }}})
	require.NoError(t, err)
	defer mc.Close(context.Background())
	metas := []string{"prioq:{" + one.Name() + "}:meta", "prioq:{" + three.Name() + "}:meta"}
	for _, k := range metas {
		require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "DEL", k)))
	}
	found, err := prioq.ListQueues(ctx, cl, base+"-*")
	require.NoError(t, err)
	require.Empty(t, found, "lost")
	require.Eventually(t, func() bool {
		found, err := prioq.ListQueues(ctx, cl, base+"-*")
		return err == nil && len(found) == 2
	}, 10*time.Second, 50*time.Millisecond, "both meta keys put back")
	_, err = three.Enqueue(ctx, []byte("x"), prioq.Priority(50))
	require.NoError(t, err)
	later, err := prioq.NewMultiConsumer(ctx, cl, prioq.MultiConfig{Pattern: base + "-*"})
	require.NoError(t, err)
	defer later.Close(context.Background())
	require.Equal(t, []string{one.Name(), three.Name()}, later.Queues())
	require.NoError(t, mc.Close(ctx))
	m, err := later.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "x", string(m.Payload))
	require.NoError(t, m.Ack(ctx))
}

// The README's ACL for prioq's user works on a cluster, with CLUSTER SLOTS
// added for radix's Cluster client (ACL users are per node: set on each).
func TestREADMEACLPermissionsSufficeOnCluster(t *testing.T) {
	c := newTestCluster(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rules := []string{"SETUSER", "app", "on", ">pw", "resetkeys", "~prioq:*", "~prioq/*", "resetchannels", "&prioq:*", "&prioq/*",
		"-@all", "+@read", "+@write", "+@scripting", "+@pubsub", "+@transaction", "+@connection", "+time", "+config|get", "+cluster|slots"}
	for _, p := range c.primaries {
		require.NoError(t, nodeDo(ctx, p.addr(), nil, "ACL", rules...))
	}
	cl, err := radix.ClusterConfig{PoolConfig: prioq.LazyPools(radix.PoolConfig{Size: 8, PingInterval: -1,
		Dialer: radix.Dialer{AuthUser: "app", AuthPass: "pw"}})}.New(ctx, c.addrs())
	require.NoError(t, err)
	defer cl.Close()
	base := "acl-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	q, err := prioq.Open(ctx, cl, base+"-q", prioq.Config{Layout: prioq.Range(0, 99, 4), Shards: 3})
	require.NoError(t, err)
	var reported []string
	var mu sync.Mutex
	mc, err := prioq.NewMultiConsumer(ctx, cl, prioq.MultiConfig{Pattern: base + "-*", Consumer: prioq.ConsumerConfig{
		OnError: func(err error) { mu.Lock(); reported = append(reported, err.Error()); mu.Unlock() }}})
	require.NoError(t, err)
	defer mc.Close(context.Background())
	for i := range 6 {
		start := time.Now()
		_, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), prioq.Priority(int64(i)), prioq.Group("g"))
		require.NoError(t, err)
		m, err := mc.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(i), string(m.Payload))
		require.Less(t, time.Since(start), time.Second, "announced: not found by the probe (2 s)")
		require.NoError(t, m.Ack(ctx))
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, reported)
}
