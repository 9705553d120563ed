// Package inversions counts priority inversions in a record of deliveries:
// what the cluster benchmark and the fan-in benchmark report.
package inversions

import (
	"container/heap"
	"slices"
	"time"
)

// Delivery is one message's priority, when it was ready (enqueued: the
// time before the enqueue call, so no later than it really was) and when a
// consumer took it from Redis (its lease's start): a delivery is the queue's
// choice; in what order a worker pool then starts the handlers of one take
// is the Go scheduler's.
type Delivery struct {
	Prio         int64
	Ready, Taken time.Time
}

// Count counts the deliveries of priority p taken while a message of a
// higher priority had been ready for at least window and was not yet taken.
func Count(recs []Delivery, window time.Duration) int {
	type event struct {
		at    time.Time
		taken bool
		i     int
	}
	events := make([]event, 0, 2*len(recs))
	for i, r := range recs {
		events = append(events, event{r.Ready, false, i}, event{r.Taken, true, i})
	}
	// In time order; at one instant, what became ready before what was taken.
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		switch {
		case a.taken == b.taken:
			return 0
		case a.taken:
			return 1
		default:
			return -1
		}
	})
	waiting := map[int64]*readyHeap{} // per priority, the oldest ready first
	taken := make([]bool, len(recs))
	n := 0
	for _, e := range events {
		r := recs[e.i]
		if !e.taken {
			h := waiting[r.Prio]
			if h == nil {
				h = &readyHeap{}
				waiting[r.Prio] = h
			}
			heap.Push(h, readyItem{r.Ready, e.i})
			continue
		}
		taken[e.i] = true
		for p, h := range waiting {
			if p <= r.Prio {
				continue
			}
			for h.Len() > 0 && taken[(*h)[0].i] {
				heap.Pop(h)
			}
			if h.Len() > 0 && !(*h)[0].at.After(e.at.Add(-window)) {
				n++
				break
			}
		}
	}
	return n
}

type readyItem struct {
	at time.Time
	i  int
}

type readyHeap []readyItem

func (h readyHeap) Len() int           { return len(h) }
func (h readyHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h readyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *readyHeap) Push(x any)        { *h = append(*h, x.(readyItem)) }
func (h *readyHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
