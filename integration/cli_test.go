package integration

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// buildCLI builds the prioq command of this workspace.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "prioq")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/prioq/prioq/cmd/prioq").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

func cli(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--url", url}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output() // stdout only: a warning on stderr must not break the JSON
	require.NoError(t, err, "prioq %v: %s", args, stderr.String())
	return string(out)
}

// The command's Sentinel and Cluster URL forms reach the right servers:
// through a Sentinel it reads and writes the primary; on a cluster it finds
// the queues of every primary and routes each command to its queue's node.
func TestCommandURLForms(t *testing.T) {
	bin := buildCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("sentinel", func(t *testing.T) {
		leakCheck(t)
		primary, _, sentinel := startSentinelSet(t)
		c, err := radix.PoolConfig{Size: 2}.New(ctx, "tcp", primary.addr())
		require.NoError(t, err)
		defer c.Close()
		q, err := prioq.Open(ctx, c, "via-sentinel", prioq.Config{Layout: prioq.Levels(2)})
		require.NoError(t, err)
		url := "redis+sentinel://" + sentinel.addr() + "/pq"
		cli(t, bin, url, "enqueue", q.Name(), "--priority", "1", "hello")
		var st map[string]any
		require.NoError(t, json.Unmarshal([]byte(cli(t, bin, url, "stats", q.Name(), "--json")), &st))
		assert.Equal(t, []any{0.0, 1.0}, st["lanes"])
		assert.Contains(t, cli(t, bin, url, "queues"), "via-sentinel")
		n, err := q.Len(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "written on the primary")
	})

	t.Run("cluster", func(t *testing.T) {
		leakCheck(t)
		nodes := startCluster(t)
		var addrs []string
		for _, n := range nodes {
			addrs = append(addrs, n.addr())
		}
		cl, err := radix.ClusterConfig{PoolConfig: prioq.LazyPools(radix.PoolConfig{})}.New(ctx, addrs)
		require.NoError(t, err)
		defer cl.Close()
		var names []string
		for i := range nodes {
			q, err := prioq.Open(ctx, cl, queueOnNode("cli", i), prioq.Config{})
			require.NoError(t, err)
			names = append(names, q.Name())
		}
		url := "redis+cluster://" + strings.Join(addrs, ",")
		listed := cli(t, bin, url, "queues")
		for _, name := range names {
			assert.Contains(t, strings.Fields(listed), name, "queues of every primary")
			cli(t, bin, url, "enqueue", name, "x")
			var st map[string]any
			require.NoError(t, json.Unmarshal([]byte(cli(t, bin, url, "stats", name, "--json")), &st))
			assert.Equal(t, 1.0, st["ready"], name)
		}
	})
}
