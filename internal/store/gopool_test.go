package store

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// A goroutine of Go is kept for the next job: a job given while one waits
// runs in it (its stack grown already) rather than in a new one; jobs given
// at once run at once, none waiting for another; and a kept goroutine ends
// after keptIdle without work.
func TestGoKeepsGoroutines(t *testing.T) {
	old := keptIdle.Load()
	keptIdle.Store(int64(2 * time.Second))
	defer keptIdle.Store(old)

	ran := make(chan int, 1)
	job := func() { ran <- goid() }
	Go(context.Background(), job)
	<-ran
	for range 5 {
		var idle map[int]bool
		require.True(t, assert.Eventually(t, func() bool { idle = keptIdleIDs(); return len(idle) > 0 },
			5*time.Second, time.Millisecond, "a kept goroutine waits"))
		Go(context.Background(), job)
		id := <-ran
		assert.True(t, idle[id], "goroutine %d ran the job, not one of the kept %v", id, idle)
	}

	release := make(chan struct{})
	started := make(chan struct{}, 8)
	var busy sync.WaitGroup
	for range 8 {
		busy.Add(1)
		Go(context.Background(), func() { defer busy.Done(); started <- struct{}{}; <-release })
	}
	for range 8 {
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("a job waited for another to end")
		}
	}
	close(release)
	busy.Wait()

	// Every goroutine kept here ends keptIdle after its last job (those of
	// earlier tests of this process within the default keptIdle).
	assert.Eventually(t, func() bool { return len(keptIdleIDs()) == 0 }, 15*time.Second, 20*time.Millisecond,
		"kept goroutines end without work")
}

// goid is the running goroutine's id, read from its stack's header.
func goid() int {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := strings.Fields(string(b))
	id, _ := strconv.Atoi(f[1])
	return id
}

// keptIdleIDs are the ids of the goroutines waiting in keep for a job: the
// innermost frame of theirs that is not the runtime's is keep's.
func keptIdleIDs() map[int]bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[int]bool{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(g, "\n")
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "runtime.") {
				continue
			}
			if strings.HasPrefix(l, "github.com/prioq/prioq/internal/store.keep(") {
				if id, err := strconv.Atoi(strings.Fields(lines[0])[1]); err == nil {
					out[id] = true
				}
			}
			break
		}
	}
	return out
}
