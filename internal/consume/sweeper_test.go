package consume

import (
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
)

// jitter spreads a sweep interval over [0.75d, 1.25d). (Moved from the root
// with the sweeper.)
func TestJitter(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 3} {
		assert.Equal(t, d, jitter(d), "below 4 ns: unchanged")
	}
	for _, d := range []time.Duration{4, time.Second} {
		var low, high int
		for i := 0; i < 200; i++ {
			j := jitter(d)
			if j < d*3/4 || j >= d*5/4 {
				t.Fatalf("jitter(%v) = %v, want [%v, %v)", d, j, d*3/4, d*5/4)
			}
			if j < d {
				low++
			} else {
				high++
			}
		}
		assert.NotZero(t, low, "jitter(%v) never below d", d)
		assert.NotZero(t, high, "jitter(%v) never at or above d", d)
	}
}

// A sweeper signals every round, so a test waits for a sweep instead of
// sleeping; an idle queue's sweep reports nothing.
func TestSweeperSignalsEachRound(t *testing.T) {
	swept := make(chan struct{}, 1)
	w := &Sweeper{S: newShard(t), Opts: SweeperOptions{Interval: 20 * time.Millisecond, Swept: swept},
		Report: func(err error) { t.Errorf("reported: %v", err) }, KeepsMeta: true}
	run(t, w.Run)
	for range 3 {
		waitSignal(t, swept, 5*time.Second, "sweep")
	}
}
