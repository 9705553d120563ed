package prioq

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The defaults of Config and ConsumerConfig: a field left at its zero value
// takes the value named here (one below zero is refused: ErrInvalidOption).
// DialerConfig's are in dialer.go.
const (
	// MinDuration is the shortest duration a config field, Extend or a
	// consumer's Lease accepts: anything shorter is refused with
	// ErrInvalidOption. Shorter leases and intervals would make background
	// loops spin, and a Redis timeout under a millisecond means "forever".
	MinDuration = 10 * time.Millisecond

	// DefaultLevels is the number of levels of the default layout, Levels(3).
	DefaultLevels = 3

	// DefaultMaxPayload is Config.MaxPayload's default: 512 KiB.
	DefaultMaxPayload = 512 << 10

	// DefaultRetainMax is DefaultRetention's Max.
	DefaultRetainMax = 10000

	// DefaultMaxAttempts is Config.MaxAttempts's default.
	DefaultMaxAttempts = 10

	// DefaultBackoffBase and DefaultBackoffMax make Config.Backoff's default,
	// ExponentialBackoff(DefaultBackoffBase, DefaultBackoffMax).
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = time.Hour

	// DefaultPromoteBatch is Config.PromoteBatch's default.
	DefaultPromoteBatch = 256

	// DefaultCallTimeout is Config.CallTimeout's default: the deadline of a
	// Redis call whose context has none. Far above any call's normal
	// duration; it exists so that nothing waits forever.
	DefaultCallTimeout = 10 * time.Second

	// DefaultWaitTimeout is Config.WaitTimeout's default.
	DefaultWaitTimeout = time.Second

	// DefaultConcurrency is ConsumerConfig.Concurrency's default.
	DefaultConcurrency = 1

	// DefaultLease is ConsumerConfig.Lease's default.
	DefaultLease = 30 * time.Second

	// DefaultBlockTimeout is ConsumerConfig.BlockTimeout's default for
	// AtLeastOnce consumers and those of a Range queue,
	// DefaultBlockTimeoutAtMostOnce for other AtMostOnce ones (shorter,
	// because Close waits for a pop in progress).
	DefaultBlockTimeout           = 5 * time.Second
	DefaultBlockTimeoutAtMostOnce = 2 * time.Second

	// DefaultHeartbeat is ConsumerConfig.Heartbeat's default: a consumer
	// writes its record in the worker registry this often, and a record
	// lives three heartbeats, so a consumer that died leaves Workers within
	// 15 seconds.
	DefaultHeartbeat = 5 * time.Second

	// MaxHeartbeat is the longest ConsumerConfig.Heartbeat: a record lives
	// three heartbeats, and a consumer that dies should leave the registry
	// within hours, not never.
	MaxHeartbeat = time.Hour

	// DefaultPromoteWait is ConsumerConfig.PromoteWait's default.
	DefaultPromoteWait = 30 * time.Second

	// DefaultSweepInterval is ConsumerConfig.SweepInterval's default, unless
	// half the lease is shorter.
	DefaultSweepInterval = 10 * time.Second

	// DefaultGracePeriod is ConsumerConfig.GracePeriod's default.
	DefaultGracePeriod = 30 * time.Second

	// DefaultRetryInterval is ConsumerConfig.RetryInterval's default.
	DefaultRetryInterval = 500 * time.Millisecond
)

// minDurations refuses a duration above 0 and below MinDuration, naming its
// field (0 or less selects the field's default).
func minDurations(fields map[string]time.Duration) error {
	var bad []string
	for name, d := range fields {
		if d > 0 && d < MinDuration {
			bad = append(bad, fmt.Sprintf("%s %v", name, d))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("%w: %s below MinDuration (%v)", ErrInvalidOption, strings.Join(bad, ", "), MinDuration)
}

// negatives refuses numbers and durations below 0, named in its error: 0
// selects a field's default, and nothing below it means anything.
func negatives(ints map[string]int, durs map[string]time.Duration) error {
	var bad []string
	for name, v := range ints {
		if v < 0 {
			bad = append(bad, fmt.Sprintf("%s %d", name, v))
		}
	}
	for name, d := range durs {
		if d < 0 {
			bad = append(bad, fmt.Sprintf("%s %v", name, d))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("%w: negative %s (0 selects the default)", ErrInvalidOption, strings.Join(bad, ", "))
}

// orDefault sets *v to d when it is 0 or less: a config field left unset.
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// DefaultRetention bounds the records of Config.Retain when one of its
// fields is zero, and the records of results when Config.Retain keeps
// none: 10,000 per shard, a day.
var DefaultRetention = Retention{Max: DefaultRetainMax, For: 24 * time.Hour}
