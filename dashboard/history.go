package dashboard

import (
	"sync"
	"time"

	"github.com/prioq/prioq"
)

// How much of each queue's past the charts get: the queue's history kept in
// Redis (one reading a minute, recorded by the queue's consumers and by
// every dashboard, this one included: prioq.Queue.History) for the hour before what this process has
// read of it itself (every reading a page made, at most one a second) in the
// last hour, for at most historyQueues queues (the least recently read
// forgotten first). A page opened now starts its charts with that rather
// than empty, even from a dashboard started a minute ago.
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
	mu       sync.Mutex
	byQueue  map[string][]sample
	recorded map[string]time.Time // the minute last recorded into Redis, per queue
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

// minuteIsNew reports whether queue's minute of at was not recorded into
// the queue's history in Redis by this process yet, and marks it.
func (h *history) minuteIsNew(queue string, at time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.recorded == nil {
		h.recorded = map[string]time.Time{}
	}
	m := at.Truncate(time.Minute)
	if h.recorded[queue].Equal(m) {
		return false
	}
	if len(h.recorded) >= historyQueues {
		clear(h.recorded)
	}
	h.recorded[queue] = m
	return true
}

// withStored puts the queue's readings kept in Redis (a minute apart) in
// front of own, this process's: those of the minutes that ended before own's
// first reading (a stored reading stands for its whole minute).
func withStored(stored []prioq.Sample, own []sample) []sample {
	var out []sample
	for _, x := range stored {
		if len(own) > 0 && x.At.Add(time.Minute).UnixMilli() > own[0].At {
			break
		}
		out = append(out, sample{At: x.At.UnixMilli(), Ready: x.Ready, Delayed: x.Delayed, InFlight: x.InFlight,
			Dead: x.Dead, Enqueued: x.Enqueued, Acked: x.Acked, Retried: x.Retried, DeadLtd: x.DeadLettered})
	}
	return append(out, own...)
}
