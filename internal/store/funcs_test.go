package store

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// testShard is a Levels(3) AtLeastOnce shard of a new queue on c, opened.
func testShard(t *testing.T, c Client) *Shard {
	t.Helper()
	s := NewShards(c, testkit.QueueName(t), &Config{Layout: Levels(3), MaxAttempts: 10, PromoteBatch: 256,
		CallTimeout: 5 * time.Second, WaitTimeout: time.Second, Shards: 1})[0]
	require.NoError(t, s.WriteMeta(ctxT(t, 5*time.Second), true))
	t.Cleanup(func() { s.Purge(context.Background()) })
	return s
}

// roundTrip enqueues a message with a caller id (enqueue.lua), takes it
// (take.lua) and acks it (ack.lua) on s.
func roundTrip(t *testing.T, ctx context.Context, s *Shard, id string) {
	t.Helper()
	env := (&Envelope{ID: id, CallerID: true, Priority: 1, EnqueuedMs: time.Now().UnixMilli(), Payload: []byte("x")}).Encode()
	res, err := s.Send(ctx, []Item{{ID: id, Caller: true, Lane: 1, Priority: 1, Env: env}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	got, err := s.Take(ctx, TakeArgs{Lanes: s.Keys().HighFirst(), N: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, got.Deliveries, 1)
	assert.Equal(t, id, got.Deliveries[0].ID)
	require.NoError(t, s.AckBatch(ctx, []AckReq{got.Deliveries[0].Req()})[0])
}

// hasLibrary reports whether library name is loaded on c's server.
func hasLibrary(t *testing.T, c Client, name string) bool {
	t.Helper()
	var list []any
	require.NoError(t, c.Do(context.Background(), radix.Cmd(&list, "FUNCTION", "LIST", "LIBRARYNAME", name)))
	return len(list) > 0
}

// The library's name carries a hash of its text, and its functions that
// name: another version of prioq (here: the same scripts' names, other
// code) loads its own library beside ours, and each calls its own
// functions. Before funcs.go no library was loaded at all.
func TestTwoVersionsLibrariesCoexist(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	var other []fencedDef
	for _, d := range fencedDefs {
		other = append(other, fencedDef{name: d.name, src: "return redis.error_reply('ERR the other version')\n", growing: d.growing})
	}
	otherText, otherName := buildLibrary(other)
	_, ours := library()
	require.NotEqual(t, ours, otherName)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "FUNCTION", "LOAD", "REPLACE", otherText)))
	t.Cleanup(func() { c.Do(context.Background(), radix.Cmd(nil, "FUNCTION", "DELETE", otherName)) })

	s := testShard(t, c)
	funcs, err := s.LoadLibrary(ctx)
	require.NoError(t, err)
	assert.True(t, funcs, "this server runs Functions")
	roundTrip(t, ctx, s, "v1")
	assert.True(t, hasLibrary(t, c, ours))
	assert.True(t, hasLibrary(t, c, otherName))

	// The other version's calls reach its own functions.
	var reply string
	err = c.Do(ctx, radix.Cmd(&reply, "FCALL", otherName+"_take", "0"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the other version")
}

// A node that lost the library (a restart without persistence; FUNCTION
// FLUSH here, the same for the library) gets it again from the first call
// that misses it, and that call succeeds; no call fails meanwhile.
func TestMissingLibraryIsLoadedByTheCall(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	s := testShard(t, c)
	roundTrip(t, ctx, s, "before")
	_, ours := library()
	// Only ours: other tests' queues share this server and reload it.
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "FUNCTION", "DELETE", ours)))
	assert.False(t, hasLibrary(t, c, ours))
	calls := fcalls(t, c)
	roundTrip(t, ctx, s, "after")
	assert.True(t, hasLibrary(t, c, ours))
	assert.Greater(t, fcalls(t, c), calls, "the calls went as FCALL")
}

// fcalls is how many FCALLs c's server ran.
func fcalls(t *testing.T, c Client) int {
	t.Helper()
	var info string
	require.NoError(t, c.Do(context.Background(), radix.Cmd(&info, "INFO", "commandstats")))
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// Every fenced script is in the library, and the library loads: a script
// that would not compile as a function body (a global assigned, more
// upvalues than Lua allows) fails here.
func TestLibraryLoads(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	text, name := library()
	assert.Len(t, fencedDefs, 21)
	for _, d := range fencedDefs {
		assert.Contains(t, text, "function_name = '"+name+"_"+d.name+"'")
	}
	err := c.Do(ctx, radix.Cmd(nil, "FUNCTION", "LOAD", text))
	if err != nil {
		assert.Contains(t, err.Error(), "already exists")
	}
	assert.True(t, hasLibrary(t, c, name))
}
