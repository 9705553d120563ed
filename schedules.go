package prioq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prioq/prioq/internal/cron"
	"github.com/prioq/prioq/internal/store"
)

// MissedPolicy says what a schedule enqueues for the ticks that came due
// while no consumer of its queue promoted (all stopped, Redis down): see
// docs/schedules.md.
type MissedPolicy int

const (
	// MissedOnce enqueues one message for the ticks missed, that of the
	// latest. The default.
	MissedOnce MissedPolicy = iota
	// MissedSkip enqueues a tick's message only when that tick alone is due
	// (fired on time); after a pause that missed ticks, none of them is
	// enqueued and the schedule goes on at its next tick.
	MissedSkip
	// MissedAll enqueues a message per tick missed, the latest MaxCatchUp of
	// them (older ones are dropped), oldest first.
	MissedAll
)

// MaxCatchUp bounds the messages one fire of a MissedAll schedule enqueues.
const MaxCatchUp = store.MaxCatchUp

// MaxScheduleName is the longest schedule name, in bytes.
const MaxScheduleName = 100

func (p MissedPolicy) String() string {
	switch p {
	case MissedSkip:
		return store.MissedSkip
	case MissedAll:
		return store.MissedAll
	}
	return store.MissedOnce
}

// scheduleOptions are the options only Schedule takes.
type scheduleOptions struct {
	missed MissedPolicy
	tickID string
}

func (o *sendOptions) schedule() *scheduleOptions {
	if o.sched == nil {
		o.sched = &scheduleOptions{}
	}
	return o.sched
}

// Missed sets a schedule's missed-tick policy (Schedule only; Enqueue
// refuses it). Default MissedOnce.
func Missed(p MissedPolicy) Option {
	return func(o *sendOptions) {
		if p < MissedOnce || p > MissedAll {
			o.err = fmt.Errorf("%w: missed-tick policy %d", ErrInvalidOption, p)
		}
		o.schedule().missed = p
	}
}

// TickID sets the id format of a schedule's messages (Schedule only;
// Enqueue refuses it): "{name}" is replaced by the schedule's name, "{tick}"
// (required) by the tick's time in unix milliseconds. The result must be a
// valid ID. Default "sched:{name}:{tick}". The id is what makes a tick's
// message unique (ID): a tick enqueued twice is stored once while its
// message lives.
func TickID(format string) Option {
	return func(o *sendOptions) {
		if !strings.Contains(format, "{tick}") {
			o.err = fmt.Errorf("%w: tick id format %q has no {tick}", ErrInvalidOption, format)
		}
		o.schedule().tickID = format
	}
}

// ScheduleInfo is one schedule, as Schedules reads it.
type ScheduleInfo struct {
	Name string
	Spec string

	// Next is the next fire time (server clock); zero when the schedule is
	// off (its record did not parse: Err says why).
	Next time.Time

	// LastFired is the time of the last tick fired (its tick time, not when
	// it was enqueued); zero before the first.
	LastFired time.Time

	Priority int64
	Group    string
	Headers  map[string]string
	Payload  []byte
	Missed   MissedPolicy
	TickID   string
	// MaxWait is its ticks' MaxWait (0: none).
	MaxWait time.Duration

	// Err is set when the stored record does not parse (ErrCorrupt): the
	// schedule fires no more until Schedule replaces it.
	Err error
}

// Schedule creates or replaces the schedule name of the queue and returns
// its next fire time (the Redis server's clock). Each tick enqueues payload
// once, with the options given: Priority, Group, Headers, Missed, TickID,
// and MaxWait (each tick must be taken within d of its tick time on the
// server's clock, else it goes to the dead letters as StartBy says). Delay,
// At, ID, OrderingKey, StartBy, UniqueFor, UniqueKey, Debounce and
// DebounceFirst are refused with ErrInvalidOption.
//
// spec is a cron spec of 5 fields (minute hour day-of-month month
// day-of-week) or 6 (seconds first), "@every d" (a Go duration, ticks at the
// multiples of d since the Unix epoch), or @yearly, @monthly, @weekly,
// @daily, @hourly; "CRON_TZ=Zone " in front reads the fields in that IANA
// time zone (UTC otherwise; every process that promotes needs the zone's
// data). A bad spec is ErrInvalidSchedule, a bad name ErrInvalidID
// (1..MaxScheduleName printable bytes), and nothing is written.
//
// The queue's consumers fire the schedule: each tick is enqueued exactly
// once however many consumers promote (docs/schedules.md says how, and what
// happens at a failover). Replacing a schedule recomputes its next fire
// time from now; a tick already due and not yet fired is kept and fires
// once, under the old or the new definition. On a queue of several shards,
// schedules live in shard 0 and their messages go there; a Group is then
// refused. Two round trips; cancelling ctx abandons the call, and the
// schedule may then be set or not.
func (q *Queue) Schedule(ctx context.Context, name, spec string, payload []byte, opts ...Option) (time.Time, error) {
	rec, err := q.scheduleRecord(name, spec, payload, opts)
	if err != nil {
		return time.Time{}, err
	}
	next, err := q.shards[0].PutSchedule(ctx, name, rec)
	if err != nil && next == 0 {
		return time.Time{}, err
	}
	return time.UnixMilli(next), err
}

// scheduleRecord validates a schedule and builds what it stores.
func (q *Queue) scheduleRecord(name, spec string, payload []byte, opts []Option) (store.ScheduleRecord, error) {
	if err := store.ValidateCallerID(name); err != nil || len(name) > MaxScheduleName {
		return store.ScheduleRecord{}, fmt.Errorf("%w: schedule name %q (1..%d printable bytes, no space)", ErrInvalidID, name, MaxScheduleName)
	}
	if _, err := cron.Parse(spec); err != nil {
		return store.ScheduleRecord{}, fmt.Errorf("%w: %v", ErrInvalidSchedule, err)
	}
	var o sendOptions
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.err != nil:
		return store.ScheduleRecord{}, o.err
	case o.delay != 0 || !o.at.IsZero() || o.id != "" || o.orderingKey != "" || o.onces > 0 || !o.startBy.IsZero():
		return store.ScheduleRecord{}, fmt.Errorf("%w: Schedule takes Priority, Group, Headers, Missed, TickID and MaxWait; "+
			"not Delay, At, ID, OrderingKey, StartBy, UniqueFor, UniqueKey or Debounce (the spec says when, TickID "+
			"names the messages and keeps each tick once)", ErrInvalidOption)
	case o.maxWait > 0 && o.maxWait < time.Millisecond:
		return store.ScheduleRecord{}, fmt.Errorf("%w: MaxWait %v below a millisecond", ErrInvalidOption, o.maxWait)
	case len(payload) == 0:
		return store.ScheduleRecord{}, ErrEmptyPayload
	case len(payload) > q.cfg.MaxPayload:
		return store.ScheduleRecord{}, fmt.Errorf("%w: %d bytes (limit %d)", ErrPayloadTooLarge, len(payload), q.cfg.MaxPayload)
	}
	if err := store.ValidateHeaders(o.headers); err != nil {
		return store.ScheduleRecord{}, err
	}
	if o.group != "" {
		if err := q.checkGroup(&o); err != nil {
			return store.ScheduleRecord{}, err
		}
		if len(q.shards) > 1 {
			return store.ScheduleRecord{}, fmt.Errorf("%w: a schedule with a Group on a queue of %d shards: schedules "+
				"live in shard 0, a group in the shard of its key", ErrInvalidOption, len(q.shards))
		}
	}
	layout := q.layout()
	if !o.hasPriority {
		o.priority = layout.DefaultPriority()
	}
	lane, err := layout.LaneOf(o.priority)
	if err != nil {
		return store.ScheduleRecord{}, err
	}
	so := o.schedule()
	format := so.tickID
	if format == "" {
		format = store.DefaultTickID
	}
	// The longest tick id it makes: a 13-digit tick, and a shard suffix on
	// a queue of several shards (store.TickID).
	sample := store.TickID(format, name, 9999999999999, 1)
	if len(q.shards) > 1 {
		sample += "~" + strconv.Itoa(99999)
	}
	if err := store.ValidateCallerID(sample); err != nil {
		return store.ScheduleRecord{}, fmt.Errorf("tick id format %q: %w", format, err)
	}
	if o.maxWait > 0 {
		// Each tick carries one header more: its start-by time.
		h := map[string]string{StartByHeader: "9999999999999"}
		for k, v := range o.headers {
			h[k] = v
		}
		if err := store.ValidateHeaders(h); err != nil {
			return store.ScheduleRecord{}, err
		}
	}
	rec := store.ScheduleRecord{Spec: spec, Payload: payload, Priority: o.priority, Lane: lane, Group: o.group,
		Headers: o.headers, IDFormat: format, Missed: so.missed.String(), MaxWaitMs: o.maxWait.Milliseconds()}
	if layout.IsRange() {
		rec.Score = store.ScoreOf(o.priority)
	}
	return rec, nil
}

// Unschedule deletes schedule name: it fires no more (a tick being fired at
// that instant is enqueued or not, never half). Messages of its past ticks
// stay. ErrNotFound when the queue has no such schedule. One round trip.
func (q *Queue) Unschedule(ctx context.Context, name string) error {
	ok, err := q.shards[0].RemoveSchedule(ctx, name)
	if err == nil && !ok {
		return fmt.Errorf("prioq: unschedule %q in %q: %w", name, q.name, ErrNotFound)
	}
	return err
}

// Schedules lists the queue's schedules, by name. One round trip; it reads
// every schedule's record, payload included.
func (q *Queue) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	list, err := q.shards[0].Schedules(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ScheduleInfo, len(list))
	for i, s := range list {
		r := s.Record
		out[i] = ScheduleInfo{Name: s.Name, Spec: r.Spec, Priority: r.Priority, Group: r.Group, Headers: r.Headers,
			MaxWait: time.Duration(r.MaxWaitMs) * time.Millisecond,
			Payload: r.Payload, TickID: r.IDFormat, Err: s.Err}
		switch r.Missed {
		case store.MissedSkip:
			out[i].Missed = MissedSkip
		case store.MissedAll:
			out[i].Missed = MissedAll
		}
		if s.Next >= 0 && s.Err == nil {
			out[i].Next = time.UnixMilli(s.Next)
		}
		if s.Last >= 0 {
			out[i].LastFired = time.UnixMilli(s.Last)
		}
	}
	return out, nil
}
