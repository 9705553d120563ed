package prioq

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Setup: a Range queue (format 4, the default) whose only messages are in
// one group, under no limit: the group's marker heads its priority's list.
// Wrong: Stats.OldestReady reads 0 while five messages have waited 300 ms;
// the Levels layout reports their age (TestOldestReadyCountsGroups checks
// the marker case on Levels only). groupHeadLists reads a marker at a lane's
// head for Levels only, and listsDepth's head of a Range segment is the
// marker, which does not decode, so the group's list is never read.
func TestReview32RangeGroupOldestReady(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Range(0, 100, 4)})
	for range 5 {
		_, err := q.Enqueue(ctx, []byte("x"), Group("tenant"), Priority(50))
		require.NoError(t, err)
	}
	time.Sleep(300 * time.Millisecond)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(5), st.Ready)
	require.True(t, st.OldestReady >= 300*time.Millisecond, "a group's marker heads the Range list: oldest ready %v", st.OldestReady)
}

// Setup: RunNow's process dies between its two steps (its first step
// alone: on the code reviewed, a ZADD XX with score 0 on the delayed set;
// now runnow.lua, MakeDueNow). Wrong (then): Queue.Scheduled reported the
// message's Due as 1970-01-01 (the score 0), not when it was made due, and
// no promoter was told: a consumer got it only at PromoteWait (30 s). Now
// it is due at the server's now and the promoters are woken as for an
// earlier due time.
func TestReview32RunNowInterruptedReportsDueIn1970(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(3)})
	c := newConsumer(t, q, ConsumerConfig{}) // its promoter waits for the sched marker
	_, err := q.Enqueue(ctx, []byte("x"), ID("soon"), Delay(time.Hour))
	require.NoError(t, err)
	moved, err := q.shards[0].MakeDueNow(ctx, "soon")
	require.NoError(t, err)
	require.True(t, moved)
	page, err := q.Scheduled(ctx, 0, 10)
	require.NoError(t, err)
	if len(page) == 1 { // not promoted yet
		require.True(t, time.Since(page[0].Due) < time.Minute && !page[0].Due.After(time.Now().Add(time.Second)), "due %v", page[0].Due)
	}
	rctx := ctxT(t, 3*time.Second) // well below PromoteWait
	m, err := c.Receive(rctx)
	require.NoError(t, err, "the promoter was not told")
	require.Equal(t, "soon", m.ID)
}

// Setup: a consumer whose Heartbeat is 100 years (bad input, like the
// negative and too short intervals TestWorkersNoHeartbeatAndBadIntervals
// refuses). Wrong: NewConsumer accepts it; the record's time to live,
// 3*Heartbeat, overflows time.Duration to a negative number, and every
// heartbeat is refused by Redis (SET PX of a negative time), reported as
// ErrRegistry: the consumer is never listed. It should be ErrInvalidOption
// at NewConsumer (a bound on Heartbeat, or on 3*Heartbeat).
func TestReview32HeartbeatOverflowAccepted(t *testing.T) {
	cl := newClient(t)
	q := openQueue(t, cl, Config{Layout: Levels(2)})
	c, err := q.NewConsumer(ConsumerConfig{Heartbeat: 100 * 365 * 24 * time.Hour})
	if err == nil {
		c.Close(ctxT(t, 5*time.Second))
	}
	require.ErrorIs(t, err, ErrInvalidOption)
}

// Setup: a queue of two shards with 24,000 delayed messages; a page deep in
// them, Scheduled(22000, 10), as a dashboard paging on asks. Wrong: each
// shard reads its first start+n = 22,010 members (it holds about 12,000) and HMGETs all of
// their records (about 12,000 arguments, past MaxBatch) in one command, to keep
// 10: the cost of a page grows with its offset without bound (a page at
// 1,000,000 is one HMGET of a million records per shard, blocking Redis).
// Seen in SLOWLOG (threshold 0 for the call). Fix: merge on (due, member)
// from the ZRANGE WITHSCORES alone and HMGET only the n kept, or page by a
// cursor (due time, member) instead of an offset.
func TestReview32ShardedScheduledDeepPageReadsEveryRecord(t *testing.T) {
	cl := newClient(t)
	ctx := ctxT(t, 60*time.Second)
	q := openQueue(t, cl, Config{Layout: Levels(2), Shards: 2})
	items := make([]EnqueueItem, 1000)
	for i := range items {
		items[i] = EnqueueItem{Payload: []byte("x"), Options: []Option{Delay(time.Hour)}}
	}
	for range 24 {
		_, err := q.EnqueueBatch(ctx, items)
		require.NoError(t, err)
	}
	var old []string
	require.NoError(t, cl.Do(ctx, radix.Cmd(&old, "CONFIG", "GET", "slowlog-log-slower-than")))
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "CONFIG", "SET", "slowlog-log-slower-than", "0")))
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "SLOWLOG", "RESET")))
	page, err := q.Scheduled(ctx, 22000, 10)
	require.NoError(t, cl.Do(ctx, radix.Cmd(nil, "CONFIG", "SET", "slowlog-log-slower-than", old[1])))
	require.NoError(t, err)
	require.Len(t, page, 10)
	var entries []any
	require.NoError(t, cl.Do(ctx, radix.Cmd(&entries, "SLOWLOG", "GET", "128")))
	str := func(v any) string {
		if b, ok := v.([]byte); ok {
			return string(b)
		}
		return fmt.Sprint(v)
	}
	most := 0
	for _, e := range entries {
		row, _ := e.([]any)
		if len(row) < 4 {
			continue
		}
		args, _ := row[3].([]any)
		if len(args) < 2 || str(args[0]) != "HMGET" || !strings.Contains(str(args[1]), q.Name()) {
			continue
		}
		n := len(args)
		if last := str(args[n-1]); strings.HasPrefix(last, "... (") {
			var more int
			fmt.Sscanf(last, "... (%d more arguments)", &more)
			n += more - 1
		}
		most = max(most, n)
	}
	require.True(t, most > 0, "no HMGET of the queue in SLOWLOG")
	require.True(t, most <= MaxBatch+1, "an HMGET of %d arguments for a page of 10", most)
}
