package prioq

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/redisfind"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// The scripts run as Redis Functions where the server has them
// (internal/store/funcs.go). These tests are about what a library per node
// means: it is lost by a restart without persistence, and some servers have
// none.

// enqueueTakeAck runs one message with a caller id through enqueue.lua,
// take.lua and ack.lua, each call within its own 2 s.
func enqueueTakeAck(t *testing.T, q *Queue, id string) {
	t.Helper()
	ctx := ctxT(t, 2*time.Second)
	_, err := q.Enqueue(ctx, []byte("x"), ID(id), Priority(1))
	require.NoError(t, err)
	ctx = ctxT(t, 2*time.Second)
	msgs, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, id, msgs[0].ID)
	require.NoError(t, msgs[0].Ack(ctxT(t, 2*time.Second)))
}

// A restart without persistence loses the library: the next calls load it
// again on their own and succeed, each within its deadline. Failed before
// funcs.go: no library was ever loaded.
func TestRestartWithoutPersistenceLoadsTheLibraryAgain(t *testing.T) {
	bin, err := exec.LookPath(redisfind.Binary())
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx := ctxT(t, 20*time.Second)
	srv, err := redisfind.StartBinary(ctx, bin)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	_, port, _ := strings.Cut(srv.Addr, ":")
	c := ownPool(t, srv.Addr, 2)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	enqueueTakeAck(t, q, "before")
	require.Greater(t, libraryCount(t, c), 0, "Open loaded the library")

	srv.Stop()
	// The same server again on its port, without persistence
	// (redisfind.StartBinary picks a port of its own).
	again := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no", "--loglevel", "warning")
	require.NoError(t, again.Start())
	t.Cleanup(func() { again.Process.Kill(); again.Wait() })
	// The pool's connections broke with the restart; wait until it has
	// new ones (that is radix's, not the library's).
	// (Asking what the test asks next, on every connection: a PING may
	// pass on one while the other is still the broken one, EOF.)
	libraries := -1
	require.Eventually(t, func() bool {
		for range 4 {
			var list []any
			if c.Do(ctx, radix.Cmd(&list, "FUNCTION", "LIST")) != nil {
				return false
			}
			libraries = len(list)
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)
	require.Zero(t, libraries, "the restart lost the library")

	enqueueTakeAck(t, q, "after")
	assert.Greater(t, libraryCount(t, c), 0, "loaded again")
	assert.Greater(t, commandCalls(t, c)["fcall"], 0, "the scripts ran as functions")
}

// A server without Functions (FCALL and FUNCTION renamed away here, as on
// Redis 6 or Dragonfly) runs the scripts as EVALSHA: Open and every call
// work as before, no call fails on the way.
func TestServerWithoutFunctionsRunsEvalsha(t *testing.T) {
	addr := ownServer(t, "--rename-command", "FCALL", "", "--rename-command", "FUNCTION", "")
	c := ownPool(t, addr, 2)
	q := openQueue(t, c, Config{Layout: Levels(3)})
	for _, id := range []string{"a", "b", "c"} {
		enqueueTakeAck(t, q, id)
	}
	calls := commandCalls(t, c)
	assert.Zero(t, calls["fcall"])
	assert.GreaterOrEqual(t, calls["evalsha"]+calls["eval"], 9, "enqueue, take and ack of three messages")
}

// libraryCount is how many Functions libraries c's server holds.
func libraryCount(t *testing.T, c radix.Client) int {
	t.Helper()
	var list []any
	require.NoError(t, c.Do(context.Background(), radix.Cmd(&list, "FUNCTION", "LIST")))
	return len(list)
}
