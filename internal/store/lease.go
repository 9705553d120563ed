package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// lease.go: how a delivery's lease ends or moves, the Redis half of the
// root's Ack, Retry, Extend and of a consumer's give-back: ack.lua or a
// pipeline, fail.lua, extend.lua, release.lua.

// Ack ends the lease of one delivery, merged with the other acks of the
// queue in flight at the same time (one round trip for all of them: see
// coalescer); acks of caller ids go apart, through ack.lua. Its error:
// nil, ErrLeaseLost, ErrNotReplicated, or the call's.
func (s *Shard) Ack(ctx context.Context, r AckReq) error {
	acks := s.acks
	if r.Caller {
		acks = s.idAcks
	}
	return acks.do(ctx, r, s.ack, func(err error) error { return fmt.Errorf("prioq: ack %q: %w", r.ID, err) })
}

// AckBatch ends the leases of reqs in one round trip, unmerged, and returns
// one error per request.
func (s *Shard) AckBatch(ctx context.Context, reqs []AckReq) []error { return s.ack(ctx, reqs) }

// What Fail does: retry the message, or move it to the dead letters.
const (
	FailRetry = failRetry
	FailDead  = failDead
)

// Fail ends the delivery of token with fail.lua's op (FailRetry: again
// after `after`, or the dead letters past MaxAttempts; FailDead) and
// returns what happened (FailCodeLost, FailCodeRequeued, FailCodeDead) and
// an error: ErrLeaseLost for FailCodeLost; with Config.WaitReplicas,
// ErrNotReplicated beside a code that says what was done.
func (s *Shard) Fail(ctx context.Context, token string, after time.Duration, reason, op string) (int, error) {
	return s.fail(ctx, token, after, reason, op)
}

// fail.lua's replies, for the layers above.
const (
	FailCodeLost     = failCodeLost
	FailCodeRequeued = failCodeRequeued
	FailCodeDead     = failCodeDead
)

// Release gives the deliveries of tokens back to the head of their lanes
// without counting the delivery (see release), in one round trip.
func (s *Shard) Release(ctx context.Context, tokens []string) (int, error) {
	return s.release(ctx, tokens)
}

// Extend moves the lease of token to d after the server's now (extend.lua):
// false when the lease is gone. One round trip.
func (s *Shard) Extend(ctx context.Context, token string, d time.Duration) (bool, error) {
	var ok int
	if err := s.do(ctx, extendScript.Cmd(&ok, []string{s.k.leases}, token, fmtInt(leaseMs(d)))); err != nil {
		return false, err
	}
	return ok == 1, nil
}

// What Renew reports of each token (renew.lua's replies).
const (
	RenewLost      = 0 // the lease is gone (acked, retried, expired and swept): nothing changed
	RenewOK        = 1 // its deadline is the server's now plus d, or later already
	RenewCancelled = 2 // Queue.Cancel ended it (CancelLease)
)

// Renew moves the leases of tokens to d after the server's now, each only
// while it is current and unless it ends later already (renew.lua): one
// round trip for them all. It returns one RenewLost, RenewOK or
// RenewCancelled per token.
func (s *Shard) Renew(ctx context.Context, tokens []string, d time.Duration) ([]int, error) {
	out := make([]int, 0, len(tokens))
	args := append([]string{fmtInt(leaseMs(d))}, tokens...)
	if err := s.do(ctx, renewScript.Cmd(&out, []string{s.k.leases, s.k.cancelled}, args...)); err != nil {
		return nil, fmt.Errorf("prioq: renew %d leases in %q: %w", len(tokens), s.name, err)
	}
	if len(out) != len(tokens) {
		return nil, fmt.Errorf("prioq: renew %d leases in %q: %w", len(tokens), s.name, ErrScript)
	}
	return out, nil
}

// CancelMarkKept is how long the mark of a delivery ended by CancelLease
// stays for its holder's renewer to read.
const CancelMarkKept = time.Hour

// CancelLease ends the delivery of token, a delivery of message id of group
// g ("" for none), for Queue.Cancel (cancelrun.lua): not retried, its
// caller id released, its group's slot freed, the token marked for its
// holder (Renew reports RenewCancelled), counted "cancelled". false when no
// lease has that token (acked, retried or expired meanwhile): nothing changed.
func (s *Shard) CancelLease(ctx context.Context, token, id, g string) (bool, error) {
	var n int
	keys := []string{s.k.leases, s.k.inflight, s.k.ids, s.k.cancelled, s.k.counts, s.k.wake, s.k.lanes[0]}
	err := s.write(ctx, s.eval(cancelRunScript, &n, keys, s.kind(), strconv.Itoa(len(s.k.lanes)),
		token, id, g, fmtInt(leaseMs(CancelMarkKept))))
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return false, fmt.Errorf("prioq: cancel %q in %q: %w", id, s.name, err)
	}
	return n == 1, err
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// ack ends each delivery's lease in one round trip. For generated ids it is a
// pipeline of ZREM + HDEL per message, no Lua: the ZREM reply is the fence (1
// only while this delivery's lease token is current; an expired lease was
// re-leased under a new token, so the HDEL of an old token never touches the
// new delivery). Each message's outcome is its own ZREM's: an error reply of
// another command (the HINCRBY of the total refused at maxmemory, an HDEL on
// a wrong-typed record hash, which then holds no record) is not its error.
// Caller ids must be released only when the ack wins, which needs the ZREM's
// answer first, so batches holding one go through ack.lua (Ack merges them
// apart from the others: see shard.idAcks). A message of a group leaves its
// group's leases by an SREM of its token (idempotent, so it needs no fence),
// and when the group waits at its limit its markers go back (unpark.lua).
func (s *Shard) ack(ctx context.Context, reqs []AckReq) []error {
	if !slices.ContainsFunc(reqs, func(r AckReq) bool { return r.Caller }) {
		errs, _ := s.ackPipelined(ctx, reqs, nil)
		return errs
	}
	removed := make([]int, len(reqs))
	args := make([]string, 0, 2+3*len(reqs))
	args = append(args, s.kind(), strconv.Itoa(len(s.k.lanes)))
	for _, r := range reqs {
		id := ""
		if r.Caller {
			id = r.ID
		}
		args = append(args, r.Token, id, r.Group)
	}
	// The script's reply replaces removed whole; it counts its acks itself.
	keys := []string{s.k.leases, s.k.inflight, s.k.ids, s.k.counts, s.k.wake, s.k.lanes[0]}
	werr, notRepl := s.writeWait(ctx, s.eval(ackScript, &removed, keys, args...))
	errs := make([]error, len(reqs))
	if werr != nil {
		return fill(errs, fmt.Errorf("prioq: ack in %q: %w", s.name, werr))
	}
	if len(removed) != len(reqs) {
		return fill(errs, fmt.Errorf("prioq: ack in %q: %w", s.name, ErrScript))
	}
	for i, r := range reqs {
		switch {
		case removed[i] == 0:
			errs[i] = fmt.Errorf("prioq: ack %q: %w", r.ID, ErrLeaseLost)
		case notRepl != nil:
			errs[i] = fmt.Errorf("prioq: ack %q: %w", r.ID, notRepl)
		}
	}
	return errs
}

// ackPipelined is ack of generated ids: ZREM + HDEL per message, pipelined.
// A command a cluster node refused because the shard's slot is moving did not
// run, and goes again after a wait (until ctx ends): a ZREM with its HDEL, or
// the HDEL alone of an ack that won.
//
// extra, when not nil, goes last in the first pipeline (a take the acks ride
// on: see takeRiding), whose error it returns beside the acks' (nil, an
// error reply of one of its commands, or the call's: then extra's receiver
// must not be read). extra's own error reply, if its receiver keeps it
// (ownReply), is no ack's.
func (s *Shard) ackPipelined(ctx context.Context, reqs []AckReq, extra radix.Action) (errs []error, first error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
	}
	type job struct {
		i    int
		zrem bool // the fence and the record; else the record alone
	}
	jobs := make([]job, len(reqs))
	for i := range jobs {
		jobs[i] = job{i: i, zrem: true}
	}
	errs = make([]error, len(reqs))
	wait := 5 * time.Millisecond
	var unpark []string // groups whose ack won while they waited at their limit
	for round := 0; len(jobs) > 0; round++ {
		removed, hdel := make([]int, len(jobs)), make([]int, len(jobs)) // -1: no reply yet
		parked := make([]int, len(jobs))
		p := radix.NewPipeline()
		for j, jb := range jobs {
			removed[j], hdel[j] = -1, -1
			r := reqs[jb.i]
			if jb.zrem {
				p.Append(radix.Cmd(&removed[j], "ZREM", s.k.leases, r.Token))
			}
			p.Append(radix.Cmd(&hdel[j], "HDEL", s.k.inflight, r.Token))
			if r.Group != "" {
				// After the ZREM: a take that parked the group before it
				// is seen here; one after it counts without this token.
				p.Append(radix.Cmd(nil, "SREM", s.k.groupLeases(r.Group), r.Token))
				p.Append(radix.Cmd(&parked[j], "HEXISTS", s.k.gpark, r.Group))
			}
		}
		if round == 0 {
			// The total for rates (Stats.Acked): a pipeline cannot make it
			// depend on the ZREMs, so an ack that lost its lease counts too
			// (rare: rates, not accounts).
			p.Append(radix.Cmd(nil, "HINCRBY", s.k.counts, countAcked, strconv.Itoa(len(reqs))))
			if extra != nil {
				p.Append(extra)
			}
		}
		werr, notRepl := s.writeWait(ctx, p)
		if round == 0 {
			first = werr
		}
		if werr != nil && !isReply(werr) {
			for _, jb := range jobs {
				if jb.zrem {
					errs[jb.i] = fmt.Errorf("prioq: ack in %q: %w", s.name, werr)
				}
			}
			return errs, first
		}
		redirected := isRedirect(werr)
		var redo []job
		for j, jb := range jobs {
			id := reqs[jb.i].ID
			if jb.zrem {
				switch {
				case removed[j] < 0: // its ZREM failed: a redirect, or a wrong-typed leases key
					errs[jb.i] = fmt.Errorf("prioq: ack %q: %w", id, werr)
					if redirected {
						redo = append(redo, jb)
					}
					continue
				case removed[j] == 0:
					errs[jb.i] = fmt.Errorf("prioq: ack %q: %w", id, ErrLeaseLost)
				case notRepl != nil:
					errs[jb.i] = fmt.Errorf("prioq: ack %q: %w", id, notRepl)
				default:
					errs[jb.i] = nil
				}
				if g := reqs[jb.i].Group; removed[j] == 1 && parked[j] == 1 && !slices.Contains(unpark, g) {
					unpark = append(unpark, g)
				}
			}
			if hdel[j] < 0 && redirected {
				redo = append(redo, job{i: jb.i})
			}
		}
		if len(redo) == 0 || !sleepCtx(ctx, wait) {
			break
		}
		jobs, wait = redo, min(2*wait, 100*time.Millisecond)
	}
	if len(unpark) > 0 {
		// The acks stand whatever this does: a group left parked gets its
		// markers back at its next lease end, or by SetGroupLimit.
		args := append([]string{s.kind(), strconv.Itoa(len(s.k.lanes))}, unpark...)
		if err := s.do(ctx, s.eval(unparkScript, nil, []string{s.k.wake, s.k.lanes[0]}, args...)); err != nil {
			s.cfg.Logger.WarnContext(ctx, "prioq: putting back groups waiting at their limit", "queue", s.name, "groups", unpark, "error", err)
		}
	}
	return errs, first
}

// bury moves a delivery that cannot be decoded to the dead-letter list with
// the reason. On a Redis error the lease simply expires and the sweep retries.
func (s *Shard) bury(ctx context.Context, token string, why error) {
	s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "prioq: corrupt message moved to the dead letters",
		slog.String("queue", s.name), slog.String("token", token), slog.Any("error", why))
	_, _ = s.fail(ctx, token, 0, why.Error(), failBury)
}

// fail.lua's replies.
const (
	failCodeLost     = 0
	failCodeRequeued = 1
	failCodeDead     = 2
)

// fail runs fail.lua on the delivery of token and returns its reply
// (failCode*) and an error: ErrLeaseLost for failCodeLost; with
// Config.WaitReplicas, ErrNotReplicated beside a reply that says what was done.
func (s *Shard) fail(ctx context.Context, token string, after time.Duration, reason, op string) (int, error) {
	code := failCodeLost
	err := s.write(ctx, s.eval(failScript, &code, s.k.failKeys, token,
		fmtInt(leaseMs(after)), reason, strconv.Itoa(s.cfg.MaxAttempts), s.kind(), op, s.armFlag()))
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return failCodeLost, err
	}
	if code == failCodeLost {
		return code, ErrLeaseLost
	}
	if code == failCodeDead {
		s.countFailures(ctx, countDead, 1)
	} else {
		s.countFailures(ctx, countRetried, 1)
	}
	return code, err
}

// release gives the deliveries of tokens back to the head of their lanes, in
// their order, without counting the delivery, in one round trip (release.lua),
// and returns how many came back (a delivery whose lease is gone is not this
// consumer's any more).
func (s *Shard) release(ctx context.Context, tokens []string) (int, error) {
	args := append([]string{s.kind()}, tokens...)
	var n int
	if err := s.do(ctx, s.eval(releaseScript, &n, s.k.releaseKeys, args...)); err != nil {
		return 0, fmt.Errorf("prioq: release %d messages of %q: %w", len(tokens), s.name, err)
	}
	return n, nil
}
