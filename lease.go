package prioq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// lease.go: how a delivery's lease ends or moves. Ack (done), Retry (again
// later, or the dead letters), Extend (more time), and, for what a closing
// consumer never handed out, release (back untouched); each with its Redis
// half: ack.lua or a pipeline, fail.lua, extend.lua, release.lua.

func (m *Message) leased() error {
	if m.s == nil || m.token == "" {
		return fmt.Errorf("prioq: message %q: %w", m.ID, ErrWrongMode)
	}
	return nil
}

// Ack marks the message done and deletes it: one round trip, two commands,
// shared with the other acks of its queue in flight at the same time. Acking
// a message again after an Ack that succeeded returns nil at once, so a Run
// handler may Ack itself and then return nil.
// It fails with ErrLeaseLost, changing nothing, when the lease expired and the
// message was taken back; the work may then be done twice (at-least-once).
// With Config.WaitReplicas, ErrNotReplicated means the ack was made but not
// confirmed by enough replicas. Cancelling ctx abandons the call: the ack may
// or may not have happened.
func (m *Message) Ack(ctx context.Context) error {
	if err := m.leased(); err != nil {
		return err
	}
	if Outcome(m.finished.Load()) == OutcomeAcked {
		return nil // acked already: nothing to do, no round trip
	}
	acks := m.s.acks
	if m.callerID {
		acks = m.s.idAcks
	}
	err := acks.do(ctx, m.ackReq(), m.s.ack, func(err error) error { return fmt.Errorf("prioq: ack %q: %w", m.ID, err) })
	if err == nil || errors.Is(err, ErrNotReplicated) {
		m.finished.CompareAndSwap(0, int32(OutcomeAcked))
	}
	return err
}

// Bounds of one merged ack call (two commands per message in a pipeline).
const maxMergedAcks = 256

// Retry gives the message back for another attempt after `after` (0: the
// queue's Backoff for this attempt), recording reason as its last error. When
// it has had MaxAttempts deliveries it goes to the dead-letter list instead.
// ErrLeaseLost as for Ack. One round trip. Cancelling ctx abandons the call:
// the retry may or may not have happened; if not, the lease runs out and the
// message is delivered again.
func (m *Message) Retry(ctx context.Context, after time.Duration, reason string) error {
	if err := m.leased(); err != nil {
		return err
	}
	if after <= 0 {
		after = m.s.cfg.Backoff(m.Attempts)
	}
	return m.fail(ctx, after, reason, failRetry)
}

// Extend moves the lease deadline to d from now (the Redis server's now), d at
// least MinDuration; under Run, the handler's context then ends at the new
// deadline too. ErrLeaseLost as for Ack. One round trip. Cancelling ctx
// abandons the call: the lease may or may not have moved, and LeaseDeadline
// keeps the old deadline.
//
// Under Run, once the handler's context has ended because the lease ran out
// (context.Cause is ErrLeaseExpired), Extend fails with ErrLeaseExpired: that
// context cannot come back to life, so the handler should stop and return.
// (If the lease ended while Extend was in flight, the lease in Redis may
// have moved all the same; Run's ack or retry after the handler returns
// ends it.)
func (m *Message) Extend(ctx context.Context, d time.Duration) error {
	if err := m.leased(); err != nil {
		return err
	}
	if d < MinDuration {
		return fmt.Errorf("%w: Extend(%v): below MinDuration (%v)", ErrInvalidOption, d, MinDuration)
	}
	if m.onExtend != nil && !m.onExtend(time.Time{}) {
		return fmt.Errorf("prioq: extend %q: %w: the handler's context has ended", m.ID, ErrLeaseExpired)
	}
	deadline := time.Now().Add(d) // no later than the server's: see take
	var ok int
	err := m.s.do(ctx, extendScript.Cmd(&ok, []string{m.s.k.leases}, m.token, fmtInt(leaseMs(d))))
	if err != nil {
		return fmt.Errorf("prioq: extend %q: %w", m.ID, err)
	}
	if ok == 0 {
		return fmt.Errorf("prioq: extend %q: %w", m.ID, ErrLeaseLost)
	}
	if m.onExtend != nil && !m.onExtend(deadline) {
		return fmt.Errorf("prioq: extend %q: %w: the lease ran out (and the handler's context ended) while extending", m.ID, ErrLeaseExpired)
	}
	m.deadline = deadline
	return nil
}

// AckBatch acknowledges many messages of one queue in one round trip (per
// shard they came from, the shards at once) and returns one error per
// message (nil, ErrLeaseLost, ErrNotReplicated, or the Redis error). As with
// Ack, a message acked before (by Ack or AckBatch) is not acked again and
// gets nil. Cancelling ctx abandons the call: every ack then reports the ctx
// error, and each may or may not have happened.
func AckBatch(ctx context.Context, msgs ...*Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	var todo []*Message
	var at []int // todo[i] is msgs[at[i]]
	for i, m := range msgs {
		if err := m.leased(); err != nil {
			return fill(errs, err)
		}
		if m.s.cfg != msgs[0].s.cfg { // shards of one queue share its config
			return fill(errs, fmt.Errorf("%w: AckBatch over several queues", ErrInvalidOption))
		}
		if Outcome(m.finished.Load()) != OutcomeAcked {
			todo, at = append(todo, m), append(at, i)
		}
	}
	switch len(todo) {
	case 0:
	case 1:
		errs[at[0]] = todo[0].Ack(ctx)
	default:
		var wg sync.WaitGroup
		for s, group := range byShard(todo) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reqs := make([]ackReq, len(group))
				for i, m := range group {
					reqs[i] = m.ackReq()
				}
				for i, err := range s.ack(ctx, reqs) {
					if err == nil || errors.Is(err, ErrNotReplicated) {
						group[i].finished.CompareAndSwap(0, int32(OutcomeAcked))
					}
					group[i].ackErr = err
				}
			}()
		}
		wg.Wait()
		for i, m := range todo {
			errs[at[i]], m.ackErr = m.ackErr, nil
		}
	}
	return errs
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// ackReq is what an ack needs of a delivery: its lease token, its message's
// id, and whether that id is the caller's (to release).
type ackReq struct {
	token, id string
	caller    bool
	group     string // "" for none
}

func (m *Message) ackReq() ackReq {
	return ackReq{token: m.token, id: m.ID, caller: m.callerID, group: m.Group}
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
func (s *shard) ack(ctx context.Context, reqs []ackReq) []error {
	if !slices.ContainsFunc(reqs, func(r ackReq) bool { return r.caller }) {
		return s.ackPipelined(ctx, reqs)
	}
	removed := make([]int, len(reqs))
	args := make([]string, 0, 2+3*len(reqs))
	args = append(args, s.kind(), strconv.Itoa(len(s.k.lanes)))
	for _, r := range reqs {
		id := ""
		if r.caller {
			id = r.id
		}
		args = append(args, r.token, id, r.group)
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
			errs[i] = fmt.Errorf("prioq: ack %q: %w", r.id, ErrLeaseLost)
		case notRepl != nil:
			errs[i] = fmt.Errorf("prioq: ack %q: %w", r.id, notRepl)
		}
	}
	return errs
}

// ackPipelined is ack of generated ids: ZREM + HDEL per message, pipelined.
// A command a cluster node refused because the shard's slot is moving did not
// run, and goes again after a wait (until ctx ends): a ZREM with its HDEL, or
// the HDEL alone of an ack that won.
func (s *shard) ackPipelined(ctx context.Context, reqs []ackReq) []error {
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
	errs := make([]error, len(reqs))
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
				p.Append(radix.Cmd(&removed[j], "ZREM", s.k.leases, r.token))
			}
			p.Append(radix.Cmd(&hdel[j], "HDEL", s.k.inflight, r.token))
			if r.group != "" {
				// After the ZREM: a take that parked the group before it
				// is seen here; one after it counts without this token.
				p.Append(radix.Cmd(nil, "SREM", s.k.groupLeases(r.group), r.token))
				p.Append(radix.Cmd(&parked[j], "HEXISTS", s.k.gpark, r.group))
			}
		}
		if round == 0 {
			// The total for rates (Stats.Acked): a pipeline cannot make it
			// depend on the ZREMs, so an ack that lost its lease counts too
			// (rare: rates, not accounts).
			p.Append(radix.Cmd(nil, "HINCRBY", s.k.counts, countAcked, strconv.Itoa(len(reqs))))
		}
		werr, notRepl := s.writeWait(ctx, p)
		if werr != nil && !isReply(werr) {
			for _, jb := range jobs {
				if jb.zrem {
					errs[jb.i] = fmt.Errorf("prioq: ack in %q: %w", s.name, werr)
				}
			}
			return errs
		}
		redirected := isRedirect(werr)
		var redo []job
		for j, jb := range jobs {
			id := reqs[jb.i].id
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
				if g := reqs[jb.i].group; removed[j] == 1 && parked[j] == 1 && !slices.Contains(unpark, g) {
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
	return errs
}

// bury moves a delivery that cannot be decoded to the dead-letter list with
// the reason. On a Redis error the lease simply expires and the sweep retries.
func (s *shard) bury(ctx context.Context, token string, why error) {
	s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "prioq: corrupt message moved to the dead letters",
		slog.String("queue", s.name), slog.String("token", token), slog.Any("error", why))
	_, _ = s.fail(ctx, token, 0, why.Error(), failBury)
}

// fail ends m's delivery with fail.lua's op (failRetry or failDead) and,
// when it happened, records how on m.
func (m *Message) fail(ctx context.Context, after time.Duration, reason, op string) error {
	code, err := m.s.fail(ctx, m.token, after, reason, op)
	switch {
	case code == failCodeDead:
		m.finished.CompareAndSwap(0, int32(OutcomeDeadLettered))
	case code == failCodeRequeued:
		m.finished.CompareAndSwap(0, int32(OutcomeRetried))
	}
	if err != nil {
		return fmt.Errorf("prioq: %s %q: %w", op, m.ID, err)
	}
	return nil
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
func (s *shard) fail(ctx context.Context, token string, after time.Duration, reason, op string) (int, error) {
	code := failCodeLost
	err := s.write(ctx, s.eval(failScript, &code, s.k.failKeys, token,
		fmtInt(leaseMs(after)), reason, strconv.Itoa(s.cfg.MaxAttempts), s.kind(), op, s.armFlag()))
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return failCodeLost, err
	}
	if code == failCodeLost {
		return code, ErrLeaseLost
	}
	return code, err
}

// release gives the deliveries of tokens back to the head of their lanes, in
// their order, without counting the delivery, in one round trip (release.lua),
// and returns how many came back (a delivery whose lease is gone is not this
// consumer's any more).
func (s *shard) release(ctx context.Context, tokens []string) (int, error) {
	args := append([]string{s.kind()}, tokens...)
	var n int
	if err := s.do(ctx, s.eval(releaseScript, &n, s.k.releaseKeys, args...)); err != nil {
		return 0, fmt.Errorf("prioq: release %d messages of %q: %w", len(tokens), s.name, err)
	}
	return n, nil
}
