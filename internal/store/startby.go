package store

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"
)

// StartByHeader is the header in which a message carries the time by which
// it must be taken (the root's StartBy and MaxWait): unix ms, decimal. A
// take that finds it passed does not hand the message out: AtLeastOnce moves
// it to the dead letters (reason ReasonTooLate), AtMostOnce drops it,
// reported as a dropped entry (lateOnes).
const StartByHeader = "prioq-start-by"

// ReasonTooLate starts the dead-letter reason of a message taken after its
// StartByHeader time.
const ReasonTooLate = "expired: not started by "

// startBy is d's StartByHeader time, and whether it has one that parses.
func startBy(d *Delivery) (int64, bool) {
	v, ok := d.Headers[StartByHeader]
	if !ok {
		return 0, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	return ms, err == nil
}

// tokenMs is the take's time on the server's clock, in ms, that a lease
// token starts with (TokenTime).
func tokenMs(token string) (int64, bool) {
	t := TokenTime(token)
	return t.UnixMilli(), !t.IsZero()
}

// lateOnes takes out of ds the messages taken after their StartByHeader
// time and returns the others. With a lease, the time of the take is the
// server's (its token's) and each late one goes to the dead letters
// (fail.lua, one call each: late ones are rare); a failure of that leaves
// it leased, to expire and be taken, and found late, again. Without one
// (AtMostOnce: the message already left Redis) this host's clock decides,
// and each is reported in dropped.
func (s *Shard) lateOnes(ctx context.Context, ds []*Delivery) (kept []*Delivery, dropped []error) {
	// Every take passes here: without a start-by time among them (the
	// common case) the deliveries go on as they are, nothing copied.
	if !slices.ContainsFunc(ds, func(d *Delivery) bool { _, ok := d.Headers[StartByHeader]; return ok }) {
		return ds, nil
	}
	kept = ds[:0:0]
	for _, d := range ds {
		by, ok := startBy(d)
		// The start only: a delivery after the first (a retry, a
		// redelivery, a requeued dead letter: Attempts counts this one) is
		// never late. AtMostOnce deliveries are first ones (Attempts 0).
		if !ok || d.Attempts > 1 {
			kept = append(kept, d)
			continue
		}
		now, fromToken := tokenMs(d.token)
		if !fromToken {
			now = time.Now().UnixMilli()
		}
		if now <= by {
			kept = append(kept, d)
			continue
		}
		at := time.UnixMilli(by).UTC().Format(time.RFC3339Nano)
		if d.token == "" {
			dropped = append(dropped, fmt.Errorf("prioq: receive from %q: dropped %q, not started by %s: %w", s.name, d.ID, at, ErrTooLate))
			continue
		}
		if _, err := s.fail(ctx, d.token, 0, ReasonTooLate+at, failDead); err != nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "prioq: a message taken after its start-by time stays leased until its lease ends",
				slog.String("queue", s.name), slog.String("id", d.ID), slog.String("error", err.Error()))
		}
	}
	return kept, dropped
}
