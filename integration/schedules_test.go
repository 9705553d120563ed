package integration

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// Issue 34's figure: a schedule @every 100ms fired by five consumer
// processes (each with its own promoter) while one of them is SIGKILLed and
// replaced every 2-4 s and Redis (AOF, fsync always) is SIGKILLed and
// restarted once: every tick is enqueued once (a tick's first delivery is
// counted by the tick time in its id; a redelivery after a kill has
// Attempts > 1), none is missing, and each tick's lateness (receipt - tick
// time) is reported. PRIOQ_SCHED_SECONDS sets the run's length (default 30;
// the is 60).
func TestScheduleExactlyOnceUnderKills(t *testing.T) {
	leakCheck(t)
	redis := ownRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	cl := newPool(t, redis.Addr, 8)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	spec := queueSpec{queueName(t), "levels", "alo"}
	q, err := prioq.Open(ctx, cl, spec.name, spec.config())
	require.NoError(t, err)
	run := 30 * time.Second
	if s, _ := strconv.Atoi(os.Getenv("PRIOQ_SCHED_SECONDS")); s > 0 {
		run = time.Duration(s) * time.Second
	}

	var procs, live []*helperProc
	start := func() *helperProc {
		h := startHelper(t, "consume-ticks", redis.Addr, spec, "H_WORKERS=2")
		procs = append(procs, h)
		return h
	}
	for range 5 {
		live = append(live, start())
	}
	for _, h := range live {
		h.ready(t)
	}
	first, err := q.Schedule(ctx, "tick", "@every 100ms", []byte("tick"), prioq.Missed(prioq.MissedAll))
	require.NoError(t, err)
	began := time.Now()
	rng := newRand(t, 0)
	kills, restarted := 0, false
	for time.Since(began) < run {
		time.Sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
		if !restarted && time.Since(began) > run/2 {
			require.NoError(t, redis.Kill())
			require.NoError(t, redis.Start())
			restarted = true
			t.Logf("Redis SIGKILLed and restarted at %v", time.Since(began).Round(time.Millisecond))
			continue
		}
		i := rng.IntN(len(live))
		live[i].kill()
		kills++
		live[i] = start()
	}
	// Unschedule (retried: the pool may still hold connections the restart broke).
	require.Eventually(t, func() bool { return q.Unschedule(ctx, "tick") == nil }, 10*time.Second, 50*time.Millisecond)
	var last int64
	require.Eventually(t, func() bool {
		st, err := q.Stats(ctx)
		return err == nil && st.Ready+st.InFlight+st.Delayed == 0
	}, time.Minute, 50*time.Millisecond, "the ticks are all handled")
	for _, h := range live {
		h.kill()
	}

	firsts := map[int64]int{}     // tick -> deliveries with Attempts 1
	received := map[int64]int64{} // tick -> its first receipt (ms)
	for _, h := range procs {
		for _, ev := range h.get("S") {
			f := strings.Fields(ev)
			require.Len(t, f, 3, ev)
			tick, err := strconv.ParseInt(f[0][strings.LastIndexByte(f[0], ':')+1:], 10, 64)
			require.NoError(t, err, ev)
			at, _ := strconv.ParseInt(f[1], 10, 64)
			if f[2] == "1" {
				firsts[tick]++
			}
			if r, ok := received[tick]; !ok || at < r {
				received[tick] = at
			}
			last = max(last, tick)
		}
	}
	var late []int64
	missing, twice := 0, 0
	for tick := first.UnixMilli(); tick <= last; tick += 100 {
		if _, ok := received[tick]; !ok {
			missing++
			continue
		}
		if firsts[tick] > 1 {
			twice++
			t.Errorf("tick %d enqueued %d times", tick, firsts[tick])
		}
		late = append(late, received[tick]-tick)
	}
	ticks := int(last-first.UnixMilli())/100 + 1
	assert.Zero(t, missing, "ticks never delivered, of %d", ticks)
	assert.Greater(t, ticks, int(run/(100*time.Millisecond))*8/10)
	slices.Sort(late)
	t.Logf("%d ticks over %v, 5 promoting processes, %d SIGKILLs, Redis restarted once (AOF always): %d missing, %d enqueued twice; "+
		"lateness (first receipt - tick time) p50 %d ms, p99 %d ms, max %d ms",
		ticks, run, kills, missing, twice, late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
}
