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

// Carry queues ride for the take of a fetch its caller is about to start
// (ReceiveRiding): a take that is sure to come at once, Run or not. It
// refuses (false) an ack of another shard, or of a caller id, as Offer does.
func (r *Rides) Carry(s *store.Shard, ride Ride) bool {
	if r == nil || s != r.s || ride.Req.Caller {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
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

// ReceiveRiding is Receive with an ack riding on the take it starts (an
// ack-and-receive call): when nothing is held, no fetch is in progress and
// the source's Rides carry it (see Rides.Carry) for s, the ride goes on the
// first take of the fetch it starts, and the fetch calls its Done whatever
// becomes of the take (the take's pipeline, or alone if the fetch waits for
// work or the take was not sent); carried is then true, and the rest is
// Receive's. Otherwise it returns at once, carried false, having changed
// nothing: the caller acks alone and calls Receive.
func (f *Fetcher) ReceiveRiding(ctx context.Context, n int, s *store.Shard, ride Ride) (ds []*store.Delivery, carried bool, err error) {
	f.mu.Lock()
	rides := RidesOf(f.src)
	if f.closed || len(f.held) > 0 || f.running != nil || f.err != nil || ctx.Err() != nil || !rides.Carry(s, ride) {
		f.mu.Unlock()
		return nil, false, nil
	}
	f.startFetch(ctx, n)
	f.mu.Unlock()
	ds, err = f.receive(ctx, n, true)
	return ds, true, err
}
