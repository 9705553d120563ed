package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/redisfind"
	"github.com/stretchr/testify/require"
)

// A Redis Cluster of the test's own, from local redis-server processes, with
// what the tests of sharded queues do to it: fail a primary over, move slots
// between primaries while clients run, add a primary.

type testCluster struct {
	t         *testing.T
	bin       string
	primaries []*localProc
	replicas  []*localProc // replicas[i] replicates primaries[i] (when asked for)
}

func clusterArgs() []string {
	return []string{"--bind", "127.0.0.1", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000", "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--loglevel", "warning"}
}

// newTestCluster starts n primaries holding equal runs of slots in order (as
// redis-cli --cluster create splits them) and, with replicas, one replica of
// each; it returns once every node says cluster_state:ok.
func newTestCluster(t *testing.T, n int, replicas bool) *testCluster {
	c := &testCluster{t: t, bin: needBinary(t, redisfind.Binary())}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		c.primaries = append(c.primaries, startLocal(t, c.bin, clusterArgs()...))
	}
	for i, p := range c.primaries {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		require.NoError(t, nodeDo(ctx, p.addr(), nil, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)))
	}
	for _, p := range c.primaries[1:] {
		c.meet(ctx, p)
	}
	if replicas {
		for _, p := range c.primaries {
			r := startLocal(t, c.bin, clusterArgs()...)
			c.meet(ctx, r)
			c.replicas = append(c.replicas, r)
			id := c.nodeID(p)
			require.Eventually(t, func() bool {
				return nodeDo(ctx, r.addr(), nil, "CLUSTER", "REPLICATE", id) == nil
			}, 10*time.Second, 50*time.Millisecond, "replica %s of %s", r.addr(), p.addr())
		}
		for _, r := range c.replicas {
			require.Eventually(t, func() bool { return infoField(ctx, r.addr(), "replication", "master_link_status") == "up" },
				15*time.Second, 50*time.Millisecond, "replica %s in sync", r.addr())
		}
	}
	c.waitOK()
	return c
}

func (c *testCluster) meet(ctx context.Context, p *localProc) {
	require.NoError(c.t, nodeDo(ctx, c.primaries[0].addr(), nil, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(p.port)))
}

func (c *testCluster) nodes() []*localProc {
	return append(append([]*localProc(nil), c.primaries...), c.replicas...)
}

func (c *testCluster) addrs() []string {
	var out []string
	for _, p := range c.nodes() {
		out = append(out, p.addr())
	}
	return out
}

func (c *testCluster) waitOK() { waitClusterOK(c.t, c.nodes()) }

func (c *testCluster) nodeID(p *localProc) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var id string
	require.NoError(c.t, nodeDo(ctx, p.addr(), &id, "CLUSTER", "MYID"))
	return id
}

// client is a radix Cluster client of the cluster (syncing its topology every
// second, so that a failover is noticed soon).
func (c *testCluster) client(ctx context.Context, size int) radix.MultiClient {
	return c.clientSyncing(ctx, size, time.Second)
}

// clientSyncing is client with its own topology sync interval.
func (c *testCluster) clientSyncing(ctx context.Context, size int, every time.Duration) *radix.Cluster {
	cl, err := radix.ClusterConfig{PoolConfig: prioq.LazyPools(radix.PoolConfig{Size: size, PingInterval: -1}), SyncEvery: every}.
		New(ctx, c.addrs())
	require.NoError(c.t, err)
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// ownerOf is the address of the primary serving slot, as node asks.
func (c *testCluster) ownerOf(slot int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range c.nodes() {
		var nodes string
		if err := nodeDo(ctx, p.addr(), &nodes, "CLUSTER", "NODES"); err != nil {
			continue
		}
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "master") {
				continue
			}
			for _, r := range f[8:] {
				if strings.HasPrefix(r, "[") {
					continue // a slot being moved
				}
				lo, hi, _ := strings.Cut(r, "-")
				if hi == "" {
					hi = lo
				}
				l, _ := strconv.Atoi(lo)
				h, _ := strconv.Atoi(hi)
				if slot >= l && slot <= h {
					addr, _, _ := strings.Cut(f[1], "@")
					return addr
				}
			}
		}
		return ""
	}
	return ""
}

func (c *testCluster) byAddr(addr string) *localProc {
	for _, p := range c.nodes() {
		if p.addr() == addr {
			return p
		}
	}
	c.t.Fatalf("no node %s", addr)
	return nil
}

// moveSlot moves slot from its primary to the primary to, as an operator
// reshards: IMPORTING on the target, MIGRATING on the source, MIGRATE of its
// keys batch keys at a time with pause between batches, then NODE on every
// primary. It returns how long the slot was moving.
func (c *testCluster) moveSlot(slot int, to *localProc, batch int, pause time.Duration) time.Duration {
	start := time.Now()
	m := c.openMove(slot, to)
	if m == nil {
		return 0
	}
	for m.migrateBatch(batch) > 0 {
		time.Sleep(pause)
	}
	m.finish()
	return time.Since(start)
}

// A slotMove is a slot being moved between two primaries, opened by
// openMove: the slot IMPORTING on the target and MIGRATING on the source,
// its keys moved by the test with migrate or migrateBatch (so that a test can
// stop halfway: some of a shard's keys on each node), ended by finish.
type slotMove struct {
	c        *testCluster
	slot     string
	from, to *localProc
	toID     string
}

// openMove opens the move of slot from its primary to to (nil when to
// already serves it).
func (c *testCluster) openMove(slot int, to *localProc) *slotMove {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	from := c.byAddr(c.ownerOf(slot))
	if from == to {
		return nil
	}
	m := &slotMove{c: c, slot: strconv.Itoa(slot), from: from, to: to, toID: c.nodeID(to)}
	require.NoError(t, nodeDo(ctx, to.addr(), nil, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", c.nodeID(from)))
	require.NoError(t, nodeDo(ctx, from.addr(), nil, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.toID))
	return m
}

// migrate moves keys (of the slot, on the source) to the target, REPLACE
// when replace (what redis-cli --cluster fix --cluster-replace does); it
// returns MIGRATE's error (BUSYKEY when a key exists on both nodes).
func (m *slotMove) migrate(replace bool, keys ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{"127.0.0.1", strconv.Itoa(m.to.port), "", "0", "5000"}
	if replace {
		args = append(args, "REPLACE")
	}
	return nodeDo(ctx, m.from.addr(), nil, "MIGRATE", append(append(args, "KEYS"), keys...)...)
}

// keysLeft lists up to n keys of the slot still on the source.
func (m *slotMove) keysLeft(n int) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	require.NoError(m.c.t, nodeDo(ctx, m.from.addr(), &keys, "CLUSTER", "GETKEYSINSLOT", m.slot, strconv.Itoa(n)))
	return keys
}

// migrateBatch moves up to batch keys of the slot still on the source and
// returns how many it moved.
func (m *slotMove) migrateBatch(batch int) int {
	keys := m.keysLeft(batch)
	if len(keys) > 0 {
		require.NoError(m.c.t, m.migrate(false, keys...))
	}
	return len(keys)
}

// finish moves the keys left (without REPLACE: a key on both nodes fails
// the test, as it fails an operator's move) and gives the slot to the
// target on every primary.
func (m *slotMove) finish() {
	t := m.c.t
	for m.migrateBatch(100) > 0 {
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range append([]*localProc{m.to, m.from}, m.c.primaries...) {
		if err := nodeDo(ctx, p.addr(), nil, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID); err != nil {
			t.Logf("SETSLOT NODE on %s: %v", p.addr(), err)
		}
	}
	slot, _ := strconv.Atoi(m.slot)
	require.Eventually(t, func() bool { return m.c.ownerOf(slot) == m.to.addr() }, 10*time.Second, 20*time.Millisecond)
}

// addPrimary starts a node, joins it to the cluster as a primary without
// slots, and waits for the cluster to know it.
func (c *testCluster) addPrimary() *localProc {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := startLocal(c.t, c.bin, clusterArgs()...)
	c.meet(ctx, p)
	c.primaries = append(c.primaries, p)
	id := c.nodeID(p)
	require.Eventually(c.t, func() bool {
		var nodes string
		return nodeDo(ctx, c.primaries[0].addr(), &nodes, "CLUSTER", "NODES") == nil && strings.Contains(nodes, id)
	}, 10*time.Second, 50*time.Millisecond)
	c.waitOK()
	return p
}

// primaryIndex is the index in primaries of the node at addr (-1: none).
func (c *testCluster) primaryIndex(addr string) int {
	for i, p := range c.primaries {
		if p.addr() == addr {
			return i
		}
	}
	return -1
}

func (c *testCluster) String() string {
	return fmt.Sprintf("%d primaries, %d replicas", len(c.primaries), len(c.replicas))
}
