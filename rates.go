package prioq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// Rate limits bound how many messages are taken (delivered) in any window
// of a given length, on the Redis server's clock: of a whole queue
// (SetRateLimit) or of each group (GroupLimit.Rate).
//
// They are sliding-window logs: a sorted set of the takes of the last
// window, each scored with its take's server time in microseconds. A take is
// allowed while the window ending at its time holds fewer than N; a take of
// several takes no more than the window has room for. So no window of
// length Per, wherever it starts, ever holds more than N takes, which a token
// bucket does not promise (one of burst N lets up to 2N through a window that
// starts just before a full bucket is spent and ends after it refilled). The
// price is memory: up to N entries of about 140 bytes per limited queue or
// group, dropped as they leave the window (a log idle for Per expires
// whole), which is why N is capped at MaxRate.
//
// A group at its rate limit is skipped like one at its concurrency limit
// (its marker parked), and comes back when the oldest take that holds it
// there leaves the window: a promoter puts it back then (the time is kept
// beside the delayed messages' and wakes the promoters the same way; the
// lease sweep puts back a group whose time passed unseen), so no consumer
// polls for it, and the groups without a limit go on meanwhile. A
// queue at its rate limit takes nothing: the take replies with the time
// until its next message may be taken, and the consumer sleeps until then
// (at most BlockTimeout, to see a raised limit).
//
// What counts is the take: a message redelivered after a retry or an
// expired lease is taken, and counted, again. Rate limits need AtLeastOnce,
// and the consumers of this version (older ones take past them).

// MaxRate is the largest N of a Rate (its log holds up to N takes).
const MaxRate = 100_000

// Rate is a rate limit: at most N messages taken in any window of length
// Per (1 ms .. 24 h, whole milliseconds). The zero Rate is no limit.
type Rate struct {
	N   int
	Per time.Duration
}

// String is "N/Per", or "none".
func (r Rate) String() string {
	if r.N == 0 {
		return "none"
	}
	return strconv.Itoa(r.N) + "/" + r.Per.String()
}

// validate checks r: ErrInvalidOption, with what is wrong.
func (r Rate) validate() error { return store.Rate(r).Validate() }

// SetRateLimit bounds how many messages of the whole queue are taken in any
// window of r.Per (the zero Rate removes the bound): see the package's rate
// limits. It is stored in Redis, where every consumer's next take reads it.
// A queue of several shards splits N among its shards (N/shards each, the
// remainder to the first ones), so the queue never exceeds N, but a shard
// whose share is spent waits even while another's is not: N must be at
// least the number of shards. Needs AtLeastOnce (ErrWrongMode).
// One round trip per shard.
func (q *Queue) SetRateLimit(ctx context.Context, r Rate) error {
	if err := r.validate(); err != nil {
		return err
	}
	if q.cfg.Mode != AtLeastOnce {
		return fmt.Errorf("prioq: set rate limit of %q: %w", q.name, ErrWrongMode)
	}
	k := len(q.shards)
	if r.N > 0 && r.N < k {
		return fmt.Errorf("%w: rate of %d messages for %d shards (want at least one per shard)", ErrInvalidOption, r.N, k)
	}
	return q.eachShard(func(i int, s *store.Shard) error {
		var share store.Rate
		if r.N > 0 {
			share = store.Rate{N: r.N / k, Per: r.Per}
			if i < r.N%k {
				share.N++
			}
		}
		if err := s.SetRate(ctx, share); err != nil {
			return fmt.Errorf("prioq: set rate limit of %q: %w", q.name, err)
		}
		return nil
	})
}

// RateLimit returns the queue's rate limit (the zero Rate for none), as
// SetRateLimit stored it: the sum of the shards' shares.
func (q *Queue) RateLimit(ctx context.Context) (Rate, error) {
	shares := make([]Rate, len(q.shards))
	err := q.eachShard(func(i int, s *store.Shard) error {
		r, err := s.Rate(ctx)
		if err != nil {
			return fmt.Errorf("prioq: rate limit of %q: %w", q.name, err)
		}
		shares[i] = Rate(r)
		return nil
	})
	var total Rate
	for _, r := range shares {
		total.N += r.N
		total.Per = max(total.Per, r.Per)
	}
	return total, err
}
