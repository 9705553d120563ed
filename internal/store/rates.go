package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// rates.go: the Redis half of rate limits (the root's rates.go says what
// they are): how a limit is written for the scripts, and a queue's limit.

// MaxRate is the largest N of a Rate (its log holds up to N takes).
const MaxRate = 100_000

// Rate is a rate limit: at most N takes in any window of length Per (the
// root's Rate, the same fields). The zero Rate is no limit.
type Rate struct {
	N   int
	Per time.Duration
}

// Validate checks r: ErrInvalidOption, with what is wrong.
func (r Rate) Validate() error {
	switch {
	case r.N == 0 && r.Per == 0:
		return nil
	case r.N < 1 || r.N > MaxRate:
		return fmt.Errorf("%w: rate of %d messages (want 1..%d, or 0 for none)", ErrInvalidOption, r.N, MaxRate)
	case r.Per < time.Millisecond || r.Per > 24*time.Hour || r.Per%time.Millisecond != 0:
		return fmt.Errorf("%w: rate window %v (want whole milliseconds, 1ms..24h)", ErrInvalidOption, r.Per)
	}
	return nil
}

// fmtLimit is a limit as the scripts read it (lua/inc/rates.lua limit_of): "K R P",
// P in ms; "" for no limit at all.
func fmtLimit(concurrency int, r Rate) string {
	if concurrency == 0 && r.N == 0 {
		return ""
	}
	return fmt.Sprintf("%d %d %d", concurrency, r.N, r.Per.Milliseconds())
}

// ParseLimit reads a group's limit as stored (see parseLimit).
func ParseLimit(v string) (concurrency int, r Rate) { return parseLimit(v) }

// parseLimit reads what fmtLimit wrote (or a concurrency alone, as the
// first version of groups did); zero values for what does not parse.
func parseLimit(v string) (concurrency int, r Rate) {
	f := strings.Fields(v)
	if len(f) == 0 {
		return 0, Rate{}
	}
	concurrency, _ = strconv.Atoi(f[0])
	if len(f) == 3 {
		n, err1 := strconv.Atoi(f[1])
		ms, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil && n > 0 && ms > 0 {
			r = Rate{N: n, Per: time.Duration(ms) * time.Millisecond}
		}
	}
	return max(concurrency, 0), r
}

// SetRate stores the shard's share of the queue's rate limit (the zero
// Rate removes it), which every take reads. One round trip.
func (s *Shard) SetRate(ctx context.Context, r Rate) error {
	if r.N == 0 {
		return s.do(ctx, radix.Cmd(nil, "DEL", s.k.rate))
	}
	return s.do(ctx, radix.Cmd(nil, "SET", s.k.rate, fmtLimit(0, r)))
}

// Rate reads the shard's share of the queue's rate limit (the zero Rate for
// none). One round trip.
func (s *Shard) Rate(ctx context.Context) (Rate, error) {
	var v string
	if err := s.do(ctx, radix.Cmd(&v, "GET", s.k.rate)); err != nil {
		return Rate{}, err
	}
	_, r := parseLimit(v)
	return r, nil
}
