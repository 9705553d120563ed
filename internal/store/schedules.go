package store

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/cron"
)

// schedules.go: the Redis half of schedules (the root's schedules.go is the
// API). A schedule is a record in the schedules hash and a next fire time in
// sdue (keys.go). Promote reads sdue's head inside promote.lua, at no extra
// round trip; when it has passed, fireDue reads the due schedules and, for
// each, computes from its spec the ticks to enqueue and the next fire time
// strictly after the server's now, and calls schedfire.lua, which enqueues
// them and moves the next fire time only if sdue and the record still hold
// what was read: any number of promoters race, one wins each tick, with no
// leader and no lock.

var (
	//go:embed lua/schedfire.lua
	schedFireSrc    string
	schedFireScript = newFenced("schedfire", schedFireSrc, true)

	//go:embed lua/schedput.lua
	schedPutSrc    string
	schedPutScript = newFenced("schedput", schedPutSrc, true)
)

// Missed-tick policies: what a schedule enqueues for the ticks that came
// due while no promoter ran (or fired it).
const (
	MissedOnce = "once" // one message, for the latest tick due
	MissedSkip = "skip" // a message only when one tick alone is due
	MissedAll  = "all"  // a message per tick, the latest MaxCatchUp
)

// MaxCatchUp bounds the ticks one fire enqueues under MissedAll: older
// missed ticks beyond it are dropped.
const MaxCatchUp = 100

// fireBatch is how many due schedules one read of sdue returns.
const fireBatch = 16

// ScheduleRecord is what a schedule stores: its spec and what each tick
// enqueues (validated by the root before it is stored).
type ScheduleRecord struct {
	Spec     string            `json:"spec"`
	Payload  []byte            `json:"payload"`
	Priority int64             `json:"priority"`
	Lane     int               `json:"lane"`
	Score    string            `json:"score,omitempty"`
	Group    string            `json:"group,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	IDFormat string            `json:"id"` // "{name}" and "{tick}" are replaced
	Missed   string            `json:"missed"`
	// MaxWaitMs, when above 0, gives each tick a start-by time (its
	// StartByHeader) this long after the tick (the server's clock).
	MaxWaitMs int64 `json:"max_wait_ms,omitempty"`
}

// ScheduleInfo is a stored schedule as Schedules reads it.
type ScheduleInfo struct {
	Name   string
	Record ScheduleRecord
	Rev    int64
	Next   int64 // unix ms, -1: none (a record that does not parse is taken off)
	Last   int64 // unix ms of the last tick fired, -1: none
	Err    error // the record does not parse (ErrCorrupt)
}

// DefaultTickID is the id format of a schedule's ticks.
const DefaultTickID = "sched:{name}:{tick}"

// TickID is the id of the tick at ms of schedule name with id format f. On
// a queue of several shards, whose schedules live in shard 0, "~k" is
// added for the smallest k that makes the id route to shard 0
// (HashShard), so that Cancel, RunNow and Peek by id find it there.
func TickID(f, name string, ms int64, shards int) string {
	id := strings.ReplaceAll(strings.ReplaceAll(f, "{name}", name), "{tick}", strconv.FormatInt(ms, 10))
	if shards <= 1 || HashShard(id, shards) == 0 {
		return id
	}
	for k := 0; ; k++ {
		if s := id + "~" + strconv.Itoa(k); HashShard(s, shards) == 0 {
			return s
		}
	}
}

// HashShard is the shard of an id or ordering key of a queue of n shards:
// FNV-1a, modulo n.
func HashShard(key string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// serverNow is the server's clock (ms), read in the slot of the shard's keys.
func (s *Shard) serverNow(ctx context.Context) (int64, error) {
	var t []string
	var ignored int
	err := s.doPipeline(ctx, func() *radix.Pipeline {
		p := radix.NewPipeline()
		p.Append(radix.Cmd(&ignored, "EXISTS", s.k.sdue)) // routes the pipeline to the shard's node
		p.Append(radix.Cmd(&t, "TIME"))
		return p
	})
	if err != nil {
		return 0, err
	}
	if len(t) != 2 {
		return 0, fmt.Errorf("%w: TIME replied %q", ErrScript, t)
	}
	sec, err1 := strconv.ParseInt(t[0], 10, 64)
	us, err2 := strconv.ParseInt(t[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: TIME replied %q", ErrScript, t)
	}
	return sec*1000 + us/1000, nil
}

// PutSchedule stores schedule name (insert or replace) and returns its next
// fire time (unix ms, server clock). One TIME and one script call.
func (s *Shard) PutSchedule(ctx context.Context, name string, rec ScheduleRecord) (int64, error) {
	spec, err := cron.Parse(rec.Spec)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalidOption, err)
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	now, err := s.serverNow(ctx)
	if err != nil {
		return 0, fmt.Errorf("prioq: schedule %q in %q: %w", name, s.name, err)
	}
	next := spec.Next(time.UnixMilli(now))
	if next.IsZero() {
		return 0, fmt.Errorf("%w: schedule %q: %q has no tick within 30 years", ErrInvalidOption, name, rec.Spec)
	}
	var res []int64
	err = s.write(ctx, s.eval(schedPutScript, &res, []string{s.k.schedules, s.k.sdue, s.k.sched, s.k.wake},
		name, string(body), strconv.FormatInt(next.UnixMilli(), 10), s.yesIfSharded()))
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return 0, fmt.Errorf("prioq: schedule %q in %q: %w", name, s.name, err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("prioq: schedule %q in %q: %w", name, s.name, ErrScript)
	}
	if err != nil {
		return res[1], fmt.Errorf("prioq: schedule %q in %q: %w", name, s.name, err)
	}
	return res[1], nil
}

// RemoveSchedule deletes schedule name and reports whether it existed.
func (s *Shard) RemoveSchedule(ctx context.Context, name string) (bool, error) {
	var n int64
	err := s.write(ctx, s.eval(schedPutScript, &n, []string{s.k.schedules, s.k.sdue, s.k.sched, s.k.wake},
		name, "", "0", s.yesIfSharded()))
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return false, fmt.Errorf("prioq: unschedule %q in %q: %w", name, s.name, err)
	}
	if err != nil {
		return n == 1, fmt.Errorf("prioq: unschedule %q in %q: %w", name, s.name, err)
	}
	return n == 1, nil
}

func (s *Shard) yesIfSharded() string {
	if s.sharded() {
		return argYes
	}
	return argNo
}

// Schedules reads every schedule of the shard, ordered by name. One round
// trip (HGETALL and ZRANGE in a pipeline).
func (s *Shard) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	var recs map[string]string
	var due []string
	err := s.doPipeline(ctx, func() *radix.Pipeline {
		recs, due = nil, nil
		p := radix.NewPipeline()
		p.Append(radix.Cmd(&recs, "HGETALL", s.k.schedules))
		p.Append(radix.Cmd(&due, "ZRANGE", s.k.sdue, "0", "-1", "WITHSCORES"))
		return p
	})
	if err != nil {
		return nil, fmt.Errorf("prioq: schedules of %q: %w", s.name, err)
	}
	next := make(map[string]int64, len(due)/2)
	for i := 0; i+1 < len(due); i += 2 {
		if f, err := strconv.ParseFloat(due[i+1], 64); err == nil {
			next[due[i]] = int64(f)
		}
	}
	out := make([]ScheduleInfo, 0, len(recs))
	for name, v := range recs {
		info := parseSchedule(name, v)
		info.Next = -1
		if n, ok := next[name]; ok {
			info.Next = n
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// parseSchedule reads a stored "rev|last|JSON" record.
func parseSchedule(name, v string) ScheduleInfo {
	info := ScheduleInfo{Name: name, Last: -1, Next: -1}
	revS, rest, ok1 := strings.Cut(v, "|")
	lastS, body, ok2 := strings.Cut(rest, "|")
	// As strict as schedfire.lua's reading ("^(%d+)|%d*|"): a record Go
	// read and the script did not would lose its compare forever.
	rev, err := strconv.ParseInt(revS, 10, 64)
	if !ok1 || !ok2 || err != nil || !allDigits(revS) || !allDigits(lastS) && lastS != "" {
		info.Err = fmt.Errorf("%w: schedule %q: record %.40q", ErrCorrupt, name, v)
		return info
	}
	info.Rev = rev
	if lastS != "" {
		if l, err := strconv.ParseInt(lastS, 10, 64); err == nil {
			info.Last = l
		}
	}
	if err := json.Unmarshal([]byte(body), &info.Record); err != nil {
		info.Err = fmt.Errorf("%w: schedule %q: %v", ErrCorrupt, name, err)
		return info
	}
	if _, err := cron.Parse(info.Record.Spec); err != nil {
		info.Err = fmt.Errorf("%w: schedule %q: %v", ErrCorrupt, name, err)
	}
	return info
}

// fireDue fires the schedules due at nowMs (server clock), up to fireBatch
// of them, and reports whether any was due. Each fire is its own
// compare-and-set: one that another promoter won, or that an upsert
// overtook, writes nothing (the next promotion sees the new state).
func (s *Shard) fireDue(ctx context.Context, nowMs int64) error {
	var due []string
	if err := s.do(ctx, radix.Cmd(&due, "ZRANGEBYSCORE", s.k.sdue, "-inf", strconv.FormatInt(nowMs, 10),
		"WITHSCORES", "LIMIT", "0", strconv.Itoa(fireBatch))); err != nil {
		return fmt.Errorf("prioq: schedules of %q: %w", s.name, err)
	}
	if len(due) == 0 {
		return nil
	}
	names := make([]string, 0, len(due)/2)
	for i := 0; i+1 < len(due); i += 2 {
		names = append(names, due[i])
	}
	var vals []string // a missing record reads as "", which no record is
	if err := s.do(ctx, radix.Cmd(&vals, "HMGET", append([]string{s.k.schedules}, names...)...)); err != nil {
		return fmt.Errorf("prioq: schedules of %q: %w", s.name, err)
	}
	if len(vals) != len(names) {
		return fmt.Errorf("prioq: schedules of %q: %w: HMGET of %d gave %d", s.name, ErrScript, len(names), len(vals))
	}
	var errs []error
	for i, name := range names {
		if err := s.fireOne(ctx, name, due[2*i+1], vals[i], vals[i] == "", nowMs); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// fireOne fires schedule name, read with next fire time expected and record
// v (missing: none), at nowMs.
func (s *Shard) fireOne(ctx context.Context, name, expected, v string, missing bool, nowMs int64) error {
	exp, err := strconv.ParseFloat(expected, 64)
	if err != nil {
		return fmt.Errorf("prioq: schedule %q of %q: %w: next fire time %q", name, s.name, ErrCorrupt, expected)
	}
	var info ScheduleInfo
	if missing {
		info.Err = fmt.Errorf("%w: schedule %q has a next fire time and no record", ErrCorrupt, name)
	} else {
		info = parseSchedule(name, v)
	}
	rev, newNext := "", ""
	var args []string
	if info.Err == nil {
		spec, _ := cron.Parse(info.Record.Spec) // parseSchedule parsed it
		ticks, next := dueTicks(spec, int64(exp), nowMs, info.Record.Missed)
		rev = strconv.FormatInt(info.Rev, 10)
		if next >= 0 {
			newNext = strconv.FormatInt(next, 10)
		}
		args = s.tickArgs(name, info.Record, ticks, nowMs)
	}
	// As a promotion, a fire does not wait for replicas (WaitReplicas): it
	// is the background's write, and a WAIT per tick that a primary
	// without replicas never confirms would fail every promotion after a
	// failover.
	var res []int64
	err = s.do(ctx, s.eval(schedFireScript, &res,
		[]string{s.k.schedules, s.k.sdue, s.k.ids, s.k.seq, s.k.delayed, s.k.dstore, s.k.sched, s.k.counts},
		append([]string{name, expected, rev, newNext, s.yesIfSharded(), strconv.Itoa(len(args) / 5)}, args...)...))
	if err != nil {
		return fmt.Errorf("prioq: fire schedule %q of %q: %w", name, s.name, err)
	}
	if info.Err != nil && len(res) == 2 && res[0] == 1 {
		return fmt.Errorf("prioq: schedule %q of %q taken off (Schedule it again to mend it): %w", name, s.name, info.Err)
	}
	return nil
}

// tickArgs are schedfire.lua's 5 fields per tick.
func (s *Shard) tickArgs(name string, r ScheduleRecord, ticks []int64, nowMs int64) []string {
	args := make([]string, 0, 5*len(ticks))
	for _, t := range ticks {
		id := TickID(r.IDFormat, name, t, s.cfg.Shards)
		h := r.Headers
		if r.MaxWaitMs > 0 {
			h = make(map[string]string, len(r.Headers)+1)
			for k, v := range r.Headers {
				h[k] = v
			}
			h[StartByHeader] = strconv.FormatInt(t+r.MaxWaitMs, 10)
		}
		env := Envelope{ID: id, CallerID: true, Group: r.Group, Priority: r.Priority, EnqueuedMs: nowMs,
			Headers: h, Payload: r.Payload}
		args = append(args, id, strconv.FormatInt(t, 10), strconv.Itoa(r.Lane), r.Score, string(env.Encode()))
	}
	return args
}

// dueTicks is what a schedule whose next fire time was expected enqueues at
// now under policy missed, oldest first, and its next fire time: the first
// tick strictly after now. expected counts as a tick (an upsert may have
// kept a due time that is not one of the new spec's).
func dueTicks(spec *cron.Spec, expected, now int64, missed string) ([]int64, int64) {
	next := int64(-1) // no tick within 30 years: taken off sdue
	if t := spec.Next(time.UnixMilli(now)); !t.IsZero() {
		next = t.UnixMilli()
	}
	if expected > now {
		return nil, expected
	}
	// The ticks in expected..now, the latest MaxCatchUp of them kept, and
	// how many there were.
	var ticks []int64
	count := 0
	if d := spec.Every().Milliseconds(); d > 0 {
		first := (expected/d + 1) * d // the first tick of the spec after expected
		count = 1
		if first <= now {
			count += int((now-first)/d) + 1
		}
		from := max(first, first+int64(count-1-MaxCatchUp)*d)
		if count <= MaxCatchUp {
			ticks = append(ticks, expected)
		}
		for t := from; t <= now; t += d {
			ticks = append(ticks, t)
		}
	} else {
		for t := expected; t <= now && t >= 0; {
			count++
			ticks = append(ticks, t)
			if len(ticks) > MaxCatchUp {
				ticks = ticks[1:]
			}
			nt := spec.Next(time.UnixMilli(t))
			if nt.IsZero() {
				break
			}
			t = nt.UnixMilli()
		}
	}
	if len(ticks) > MaxCatchUp {
		ticks = ticks[len(ticks)-MaxCatchUp:]
	}
	switch missed {
	case MissedAll:
		return ticks, next
	case MissedSkip:
		if count == 1 {
			return ticks, next
		}
		return nil, next
	default: // MissedOnce
		return ticks[len(ticks)-1:], next
	}
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
