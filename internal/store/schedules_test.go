package store

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/cron"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func TestDueTicks(t *testing.T) {
	every, err := cron.Parse("@every 100ms")
	require.NoError(t, err)
	minutely, err := cron.Parse("* * * * *")
	require.NoError(t, err)
	const min = 60_000
	for _, tc := range []struct {
		name          string
		spec          *cron.Spec
		expected, now int64
		missed        string
		want          []int64
		wantNext      int64
	}{
		{"on time", every, 1000, 1003, MissedOnce, []int64{1000}, 1100},
		{"on time, skip", every, 1000, 1003, MissedSkip, []int64{1000}, 1100},
		{"on time, all", every, 1000, 1003, MissedAll, []int64{1000}, 1100},
		{"not due", every, 1100, 1003, MissedAll, nil, 1100},
		{"missed, once: the latest", every, 1000, 1350, MissedOnce, []int64{1300}, 1400},
		{"missed, skip: none", every, 1000, 1350, MissedSkip, nil, 1400},
		{"missed, all", every, 1000, 1350, MissedAll, []int64{1000, 1100, 1200, 1300}, 1400},
		{"exactly at a tick", every, 1000, 1300, MissedAll, []int64{1000, 1100, 1200, 1300}, 1400},
		{"all, bounded: the latest", every, 0, 100 * (MaxCatchUp + 50), MissedAll, nil, 100 * (MaxCatchUp + 51)},
		{"kept due time off the spec", every, 1050, 1120, MissedAll, []int64{1050, 1100}, 1200},
		{"cron, missed, all", minutely, 5 * min, 8*min + 1, MissedAll, []int64{5 * min, 6 * min, 7 * min, 8 * min}, 9 * min},
		{"cron, missed, once", minutely, 5 * min, 8*min + 1, MissedOnce, []int64{8 * min}, 9 * min},
		{"cron, bounded", minutely, 0, (MaxCatchUp + 10) * min, MissedAll, nil, (MaxCatchUp + 11) * min},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next := dueTicks(tc.spec, tc.expected, tc.now, tc.missed)
			assert.Equal(t, tc.wantNext, next)
			if strings.Contains(tc.name, "bounded") {
				require.Len(t, got, MaxCatchUp)
				step := got[1] - got[0]
				assert.Equal(t, tc.now, got[len(got)-1], "the latest kept")
				for i := 1; i < len(got); i++ {
					assert.Equal(t, step, got[i]-got[i-1])
				}
				return
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestTickIDRoutesToShardZero(t *testing.T) {
	for _, n := range []int{2, 3, 16} {
		for ms := int64(0); ms < 50; ms++ {
			id := TickID(DefaultTickID, "nightly", 1_700_000_000_000+ms, n)
			assert.Equal(t, 0, HashShard(id, n), id)
			assert.True(t, strings.HasPrefix(id, "sched:nightly:17000000000"), id)
		}
	}
	assert.Equal(t, "sched:x:5", TickID(DefaultTickID, "x", 5, 1))
	assert.Equal(t, "job-5-x", TickID("job-{tick}-{name}", "x", 5, 1))
}

// schedShard is a shard of a fresh queue on the tests' Redis.
func schedShard(t testing.TB) *Shard {
	return NewShards(newClient(t), "sched-"+strings.ReplaceAll(t.Name(), "/", "-")+time.Now().Format("150405.000000"),
		&Config{Layout: Levels(1), MaxAttempts: 10, PromoteBatch: 256, CallTimeout: 10 * time.Second, WaitTimeout: time.Second,
			Shards: 1, Logger: slog.Default(), Mode: AtLeastOnce})[0]
}

// An upsert between a promoter's read of a due schedule and its fire
// makes the fire write nothing (the record's rev moved on); the tick that
// was due then fires once, under the new record, and the next fire time is
// the new spec's.
func TestScheduleUpsertOvertakesAFire(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	s := schedShard(t)
	t.Cleanup(func() { _ = s.c.Do(context.Background(), radix.Cmd(nil, "DEL", s.k.all()...)) })
	_, err := s.PutSchedule(ctx, "job", ScheduleRecord{Spec: "@every 50ms", Payload: []byte("old"), IDFormat: DefaultTickID, Missed: MissedAll})
	require.NoError(t, err)
	time.Sleep(120 * time.Millisecond) // due, and no promoter runs
	old, err := s.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, old, 1)
	now, err := s.serverNow(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, old[0].Next, now, "due")

	_, err = s.PutSchedule(ctx, "job", ScheduleRecord{Spec: "@every 1h", Payload: []byte("new"), IDFormat: DefaultTickID, Missed: MissedAll})
	require.NoError(t, err)
	var v string
	require.NoError(t, s.c.Do(ctx, radix.Cmd(&v, "HGET", s.k.schedules, "job")))
	require.True(t, strings.HasPrefix(v, "2||"), "rev 2 after the upsert: %q", v)
	// The promoter's fire with what it read before the upsert.
	oldBody := strings.Replace(v, "2||", "1||", 1)
	oldBody = strings.Replace(oldBody, `"spec":"@every 1h"`, `"spec":"@every 50ms"`, 1)
	require.NoError(t, s.fireOne(ctx, "job", fmtInt(old[0].Next), oldBody, false, now))
	var delayed int64
	require.NoError(t, s.c.Do(ctx, radix.Cmd(&delayed, "ZCARD", s.k.delayed)))
	assert.Equal(t, int64(0), delayed, "the stale fire wrote nothing")

	// The next promotion fires the kept due time, under the new record.
	_, _, _, err = s.Promote(ctx)
	require.NoError(t, err)
	var ready []string
	require.NoError(t, s.c.Do(ctx, radix.Cmd(&ready, "LRANGE", s.k.lanes[0], "0", "-1")))
	require.Len(t, ready, 1)
	e, err := DecodeEnvelope([]byte(ready[0]))
	require.NoError(t, err)
	assert.Equal(t, "new", string(e.Payload))
	assert.Equal(t, "sched:job:"+fmtInt(old[0].Next), e.ID, "the tick that was due")
	after, err := s.Schedules(ctx)
	require.NoError(t, err)
	h := time.Hour.Milliseconds()
	assert.Equal(t, (now/h+1)*h, after[0].Next, "the new spec's next tick")
	assert.Equal(t, old[0].Next, after[0].Last)
}
