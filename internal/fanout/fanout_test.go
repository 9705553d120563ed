package fanout

import (
	"sync/atomic"
	"testing"
)

// Every index is called once, and never more than workers at a time.
func TestEachBoundsConcurrency(t *testing.T) {
	var running, most atomic.Int64
	calls := make([]atomic.Int64, 200)
	Each(len(calls), 7, func(i int) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		calls[i].Add(1)
		running.Add(-1)
	})
	for i := range calls {
		if calls[i].Load() != 1 {
			t.Fatalf("index %d called %d times", i, calls[i].Load())
		}
	}
	if most.Load() > 7 {
		t.Fatalf("%d at a time, workers 7", most.Load())
	}
	Each(0, 0, func(int) { t.Fatal("called for n = 0") })
}
