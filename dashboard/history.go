package dashboard

import (
	"sync"
	"time"

	"github.com/prioq/prioq"
)

// How much of each queue's past the charts get: what this process has read
// of it (every reading a page made, at most one a second) in the last hour,
// for at most historyQueues queues (the least recently read forgotten
// first). A page opened now starts its charts with that rather than empty.
// History kept in Redis, seen by every process from the queue's start,
// needs a library change.
const (
	historySpan   = time.Hour
	historyEvery  = time.Second
	historyQueues = 1000
)

// sample is one reading of a queue's figures, as the charts draw them.
type sample struct {
	At       int64 `json:"t"` // unix ms
	Ready    int64 `json:"ready"`
	Delayed  int64 `json:"delayed"`
	InFlight int64 `json:"in_flight"`
	Dead     int64 `json:"dead"`
	Enqueued int64 `json:"enqueued"`
	Acked    int64 `json:"acked"`
	Retried  int64 `json:"retried"`
	DeadLtd  int64 `json:"dead_lettered"`
}

type history struct {
	mu      sync.Mutex
	byQueue map[string][]sample
}

// add records a reading of the queue's figures taken at at.
func (h *history) add(queue string, at time.Time, st prioq.Stats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byQueue == nil {
		h.byQueue = map[string][]sample{}
	}
	s := h.byQueue[queue]
	if n := len(s); n > 0 && at.UnixMilli()-s[n-1].At < historyEvery.Milliseconds() {
		return
	}
	if _, ok := h.byQueue[queue]; !ok && len(h.byQueue) >= historyQueues {
		h.forgetOldest()
	}
	s = append(s, sample{At: at.UnixMilli(), Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight,
		Dead: st.Dead, Enqueued: st.Enqueued, Acked: st.Acked,
		Retried: st.Retried, DeadLtd: st.DeadLettered})
	cut := 0
	for cut < len(s) && s[cut].At < at.Add(-historySpan).UnixMilli() {
		cut++
	}
	h.byQueue[queue] = s[cut:]
}

// forgetOldest drops the queue read least recently.
func (h *history) forgetOldest() {
	var oldest string
	var at int64
	for q, s := range h.byQueue {
		if last := s[len(s)-1].At; oldest == "" || last < at {
			oldest, at = q, last
		}
	}
	delete(h.byQueue, oldest)
}

// of returns a copy of the queue's samples, oldest first.
func (h *history) of(queue string) []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sample{}, h.byQueue[queue]...)
}
