package consume

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// Ride is an ack that rides on the next take of its consumer: Run's, for a
// handler that returned nil while Run waits to take again. The ack and the
// take go in one round trip (store's ride.go), each with its own outcome.
type Ride struct {
	Req  store.AckReq
	Done func(error) // called once, with the ack's error (as store.Shard.Ack's)
}

// Rides holds the acks waiting for the next take of a ShardSource (a queue of
// one shard, AtLeastOnce, its fixed lane order). It accepts them only while
// a take is sure to come soon: while Run feeds the consumer (Open) and the
// fetch is not waiting for work (pause, until the next take). A ride it
// refuses is the caller's to ack alone. The take carries what is pending when
// it is sent; what comes later waits for the next take, or is acked alone
// when the fetch stops to wait.
type Rides struct {
	s       *store.Shard
	timeout time.Duration // of an ack sent alone

	mu      sync.Mutex
	runs    int  // Runs feeding the consumer
	paused  bool // the fetch waits for work, or Run for a retry
	pending []Ride
}

func newRides(s *store.Shard, timeout time.Duration) *Rides {
	return &Rides{s: s, timeout: timeout}
}

// Open says a Run feeds the consumer: rides are accepted from now on.
func (r *Rides) Open() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs++
}

// Close says that Run stopped taking; the last one to stop acks what is
// pending alone.
func (r *Rides) Close() {
	r.mu.Lock()
	r.runs--
	var flush []Ride
	if r.runs == 0 {
		flush, r.pending = r.pending, nil
	}
	r.mu.Unlock()
	r.ackAlone(flush)
}

// Offer queues ride for the next take, or refuses it (false): no take is
// sure to come soon, or the ack is of a caller id (ack.lua, a script: it
// would go beside the take, and the take's messages wait for it).
func (r *Rides) Offer(ride Ride) bool {
	if r == nil || ride.Req.Caller {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == 0 || r.paused {
		return false
	}
	r.pending = append(r.pending, ride)
	return true
}

// Pause refuses rides until the next take, and acks what is pending alone:
// the fetch is about to wait for work, or Run to retry after an error.
func (r *Rides) Pause() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.paused = true
	flush := r.pending
	r.pending = nil
	r.mu.Unlock()
	r.ackAlone(flush)
}

// take returns the rides pending for a take being sent, and accepts rides
// again.
func (r *Rides) take() []Ride {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = false
	out := r.pending
	r.pending = nil
	return out
}

// reqs are the ack requests of rides.
func reqs(rides []Ride) []store.AckReq {
	if len(rides) == 0 {
		return nil
	}
	out := make([]store.AckReq, len(rides))
	for i, ride := range rides {
		out[i] = ride.Req
	}
	return out
}

// done hands each ride its outcome, errs being one per ride.
func done(rides []Ride, errs []error) {
	for i, ride := range rides {
		if len(errs) == len(rides) {
			ride.Done(errs[i])
		} else {
			ride.Done(fmt.Errorf("prioq: ack %q: %w: %d outcomes for %d acks", ride.Req.ID, store.ErrScript, len(errs), len(rides)))
		}
	}
}

// ackAlone acks rides in one round trip of their own.
func (r *Rides) ackAlone(rides []Ride) {
	if len(rides) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	done(rides, r.s.AckBatch(ctx, reqs(rides)))
}
