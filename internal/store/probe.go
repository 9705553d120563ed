package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/mediocregopher/radix/v4"
)

// probe.go: what a MultiConsumer asks of many shards of one node at once,
// and where the shards live.

// Probed is what Probe read of one shard.
type Probed struct {
	// Ready: its wake-up is set, or its lanes hold work while it is not
	// paused.
	Ready bool
	// Due, Lease and GDue are scores ("" for none): its first due time,
	// its first lease deadline, and the first time a group parked at its
	// rate limit comes back (ms, server clock).
	Due, Lease, GDue string
	// Status: "" read, "m" its meta key is missing (read with metas),
	// "x" unreadable here (its slot is moving, or moved).
	Status string
}

// Probe runs probe.lua over shards, all of one node of c, reading their
// lanes too and, with metas, whether the meta keys of queues of one shard
// are there (that of a queue of several is in a slot of its own, maybe on
// another node). It returns what it read of each, in order, and the
// server's now (ms). One round trip; on a Cluster client, on one connection
// of the node (the script reads keys of many slots, which a Cluster client
// refuses to send).
func Probe(ctx context.Context, c Client, shards []*Shard, metas bool) ([]Probed, int64, error) {
	n := len(shards)
	_, cluster := c.(*radix.Cluster)
	args := make([]string, 3, 3+n+(6+3)*n)
	args[0] = strconv.Itoa(n)
	if cluster {
		args[1] = "cluster"
	}
	if metas {
		args[2] = "meta"
	}
	for _, s := range shards {
		args = append(args, strconv.Itoa(len(s.k.lanes)))
	}
	for _, key := range []func(*Shard) string{
		func(s *Shard) string { return s.k.wake },
		func(s *Shard) string { return s.k.delayed },
		func(s *Shard) string { return s.k.leases },
		func(s *Shard) string { return s.k.gdue },
		func(s *Shard) string { return s.k.paused },
	} {
		for _, s := range shards {
			args = append(args, key(s))
		}
	}
	if metas {
		for _, s := range shards {
			meta := ""
			if !s.sharded() {
				meta = s.k.meta
			}
			args = append(args, meta)
		}
	}
	for _, s := range shards {
		args = append(args, s.k.lanes...) // undeclared: see probe.lua
	}
	var res []string
	var err error
	if cluster {
		// radix's Cluster client refuses keys of several slots; one
		// connection of the node runs it (the script may: see its flags).
		// That connection is clean after any outcome: one command, whose
		// reply radix has read whole when it returns nil or an error reply
		// (which put it back), and any other error closes it.
		err = c.Do(ctx, radix.WithConn(shards[0].k.slotKey(), func(ctx context.Context, conn radix.Conn) error {
			return conn.Do(ctx, probeScript.Cmd(&res, nil, args...))
		}))
	} else {
		// Elsewhere on a shared connection: WithConn would take one out of
		// the pool, which every other call of the pool waits for.
		err = c.Do(ctx, probeScript.Cmd(&res, nil, args...))
	}
	if err != nil {
		return nil, 0, err
	}
	if len(res) != 5*n+1 {
		return nil, 0, fmt.Errorf("%w: %d replies for %d shards", ErrScript, len(res), n)
	}
	out := make([]Probed, n)
	for i := range out {
		out[i] = Probed{Ready: res[i] == "1", Due: res[n+i], Lease: res[2*n+i], GDue: res[3*n+i], Status: res[4*n+i]}
	}
	now, _ := strconv.ParseInt(res[len(res)-1], 10, 64)
	return out, now, nil
}

// Nodes are the addresses of the primaries serving slots, as a radix
// Cluster client last saw the cluster ("" for each when c is not a
// *radix.Cluster). No call: the client's view of the topology.
func Nodes(c Client, slots []int) []string {
	out := make([]string, len(slots))
	cl, ok := c.(*radix.Cluster)
	if !ok {
		return out
	}
	topo := cl.Topo()
	for i, slot := range slots {
		for _, node := range topo {
			if node.SecondaryOfAddr != "" {
				continue
			}
			for _, r := range node.Slots {
				if slot >= int(r[0]) && slot < int(r[1]) {
					out[i] = node.Addr
				}
			}
		}
	}
	return out
}

// SyncTopology refreshes a Cluster client's view of the slots (CLUSTER
// SLOTS): calls made on connections of their own (a listener's, a probe's)
// get MOVED replies that the client does not see. Nothing for another
// client.
func SyncTopology(ctx context.Context, c Client) error {
	if cl, ok := c.(*radix.Cluster); ok {
		return cl.Sync(ctx)
	}
	return nil
}
