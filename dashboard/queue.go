package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prioq/prioq"
)

// What a queue's page shows of its lists: the next messages, the dead
// letters (oldest first) and the most loaded groups.
const (
	peekRows  = 20
	deadRows  = 50
	topGroups = 10
)

type lane struct {
	Index int
	Count int64
}

// queueView is one reading of a queue: its figures and the tables of its
// page, read one after another under one deadline, at At. The page renders
// it and its script polls it, so that the numbers on top and the tables
// below always come from the same reading.
type queueView struct {
	Q     *prioq.Queue
	At    time.Time
	Stats prioq.Stats
	Lanes []lane // highest priority first
	Max   int64  // the fullest lane's count
	// OutsideLanes is how many ready messages no lane counts: a group has
	// one entry in its lane whatever its count, and none while it waits at
	// a limit.
	OutsideLanes int64
	Peek         []prioq.MessageInfo
	Delayed      []prioq.ScheduledMessage // soonest due first
	Leased       []prioq.LeasedMessage    // soonest lease end first
	Dead         []prioq.DeadLetter
	Groups       []prioq.GroupStats
	// Workers are the live consumers that serve it (the worker registry);
	// WorkersErr says why they are not known.
	Workers    []prioq.Worker
	WorkersErr string
	// registry is every live worker, whatever it serves: a message's
	// holder is a process, whose registered consumers may serve other
	// queues only (HolderOf).
	registry []prioq.Worker
	// Schedules are the queue's schedules; SchedulesErr says why they are
	// not known (a key of the wrong type): the rest of the page stands.
	Schedules    []prioq.ScheduleInfo
	SchedulesErr string
	// Pages say which rows of the delayed, in-flight and dead tables
	// this reading holds (paging.go), by parameter.
	Pages map[string]pageNav
}

// HolderOf says which process holds a message in flight (its
// LeasedMessage.Holder): "host pid" of a live consumer's process that the
// holder names; "unregistered (id)" when the registry was read and no live
// consumer names it: its process died or closed (the lease will end and the
// message come back) or runs its consumers without a heartbeat; else the
// id, or "-" for a message taken before holders were named.
func (v queueView) HolderOf(holder string) string {
	return holderOf(holder, v.registry, v.WorkersErr == "")
}

// holderOf is HolderOf over registry, every live worker; known: the
// registry was read.
func holderOf(holder string, registry []prioq.Worker, known bool) string {
	if holder == "" {
		return "-"
	}
	if w, ok := prioq.HolderIn(registry, holder); ok {
		return fmt.Sprintf("%s %d", w.Host, w.PID)
	}
	if known {
		return "unregistered (" + holder + ")"
	}
	return holder
}

// Idle reports ready work that no live consumer serves.
func (v queueView) Idle() bool { return v.WorkersErr == "" && len(v.Workers) == 0 && v.Stats.Ready > 0 }

func (h *handler) read(ctx context.Context, q *prioq.Queue, query url.Values) (v queueView, err error) {
	off, err := pageOffsets(query)
	if err != nil {
		return v, err
	}
	v.Q = q
	if v.Stats, err = q.Stats(ctx); err != nil {
		return v, err
	}
	v.At = time.Now()
	if v.Peek, err = q.Peek(ctx, peekRows); err != nil {
		return v, err
	}
	if v.Delayed, err = q.Scheduled(ctx, off["delayed_from"], peekRows); err != nil {
		return v, err
	}
	if q.Mode() == prioq.AtLeastOnce {
		if v.Leased, err = q.Leased(ctx, off["inflight_from"], peekRows); err != nil {
			return v, err
		}
		if v.Dead, err = q.DeadLetters(ctx, off["dead_from"], deadRows); err != nil {
			return v, err
		}
		if v.Groups, err = q.Groups(ctx, topGroups); err != nil {
			return v, err
		}
	}
	if v.Schedules, err = q.Schedules(ctx); err != nil {
		v.SchedulesErr, err = err.Error(), nil
	}
	if v.registry, err = prioq.Workers(ctx, h.cfg.Client); err != nil {
		v.WorkersErr, err = err.Error(), nil // a registry the user may not read: the rest stands
	}
	for _, w := range v.registry {
		if w.Serves(q.Name()) {
			v.Workers = append(v.Workers, w)
		}
	}
	v.OutsideLanes = v.Stats.Ready
	for i := len(v.Stats.Lanes) - 1; i >= 0; i-- {
		v.Lanes = append(v.Lanes, lane{i, v.Stats.Lanes[i]})
		v.Max = max(v.Max, v.Stats.Lanes[i])
		v.OutsideLanes -= v.Stats.Lanes[i]
	}
	v.OutsideLanes = max(v.OutsideLanes, 0)
	v.Pages = map[string]pageNav{
		"delayed_from":  navOf(query, off, "delayed_from", len(v.Delayed), v.Stats.Delayed, peekRows),
		"inflight_from": navOf(query, off, "inflight_from", len(v.Leased), v.Stats.InFlight, peekRows),
		"dead_from":     navOf(query, off, "dead_from", len(v.Dead), v.Stats.Dead, deadRows),
	}
	h.hist.add(q.Name(), v.At, v.Stats)
	if h.hist.minuteIsNew(q.Name(), v.At) {
		_ = q.RecordHistory(ctx, v.Stats) // best effort: the page shows what it read either way
	}
	return v, nil
}

// oldest is how the page and the list say the oldest ready message's age.
// prioq measures it at the heads of the lanes and of the groups' lists it
// can name (parked groups, a group whose marker heads a Levels lane); when
// it still reads 0 while messages are ready (a Range segment headed by a
// group's marker), the page says the age is unknown instead of "0s".
func oldest(st prioq.Stats) string {
	if st.OldestReady == 0 && st.Ready > 0 {
		return "unknown (in groups)"
	}
	return st.OldestReady.Round(100 * time.Millisecond).String()
}

func (h *handler) queuePage(ctx context.Context, w http.ResponseWriter, r *http.Request, q *prioq.Queue) error {
	v, err := h.read(ctx, q, r.URL.Query())
	if err != nil {
		return err
	}
	can := map[string]bool{}
	var refusal string
	for _, a := range actions {
		err := h.authorize(r, a, q.Name())
		can[string(a)] = err == nil
		if err != nil && refusal == "" {
			refusal = strings.TrimPrefix(err.Error(), ErrForbidden.Error()+": ")
		}
	}
	if q.Mode() != prioq.AtLeastOnce { // no pause, no dead letters
		for _, a := range []Action{Pause, Resume, Requeue, RequeueAll, PurgeDead} {
			can[string(a)] = false
		}
	}
	data := map[string]any{"V": v, "Reliable": q.Mode() == prioq.AtLeastOnce, "Can": can, "Oldest": oldest(v.Stats),
		"Refusal": refusal, "Done": doneMessage(r)}
	h.render(w, "queue.html", data)
	return nil
}

// doneMessage is what the page says after an action redirected to it
// (?done=action&n=...&expect=...): how many it changed, and how many the
// confirmation counted when they differ.
func doneMessage(r *http.Request) string {
	query := r.URL.Query()
	a, ok := knownAction(query.Get("done"))
	if !ok {
		return ""
	}
	n, _ := strconv.ParseInt(query.Get("n"), 10, 64)
	msg := map[Action]string{
		Pause:      "Paused: consumers take nothing until resumed.",
		Resume:     "Resumed: consumers take again.",
		Requeue:    "Requeued the dead letter " + strconv.Quote(query.Get("id")) + ".",
		RequeueAll: "Requeued " + strconv.FormatInt(n, 10) + " dead letter(s).",
		PurgeDead:  "Deleted " + strconv.FormatInt(n, 10) + " dead letter(s).",
		Purge:      "Deleted " + strconv.FormatInt(n, 10) + " waiting message(s).",
		RunNow:     "The message " + strconv.Quote(query.Get("id")) + " is ready now.",
		Cancel:     "Cancelled the message " + strconv.Quote(query.Get("id")) + ".",
	}[a]
	if e := query.Get("expect"); e != "" && (a == RequeueAll || a == PurgeDead || a == Purge) && e != query.Get("n") {
		msg += " The confirmation counted " + e + ": the queue changed in between."
	}
	return msg
}

// statsMap is what the JSON endpoints say of a queue's figures.
func statsMap(st prioq.Stats) map[string]any {
	m := map[string]any{"lanes": st.Lanes, "ready": st.Ready, "delayed": st.Delayed,
		"in_flight": st.InFlight, "dead": st.Dead, "oldest_ready_s": st.OldestReady.Seconds(), "oldest": oldest(st),
		"paused": st.Paused, "enqueued": st.Enqueued, "acked": st.Acked, "groups": st.Groups,
		"retried": st.Retried, "dead_lettered": st.DeadLettered, "expired": st.Expired}
	if len(st.Shards) > 0 {
		var out []map[string]any
		for i, s := range st.Shards {
			out = append(out, map[string]any{"shard": i, "slot": s.Slot, "node": s.Node, "ready": s.Ready,
				"delayed": s.Delayed, "in_flight": s.InFlight, "dead": s.Dead})
		}
		m["shards"] = out
	}
	return m
}

func (h *handler) statsJSON(ctx context.Context, w http.ResponseWriter, _ *http.Request, q *prioq.Queue) error {
	st, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	m := statsMap(st)
	m["reliable"] = q.Mode() == prioq.AtLeastOnce
	m["at"] = time.Now().UnixMilli()
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(m)
}

// queueJSON is one reading of the queue (queueView) that its page polls;
// with ?history=1 also what this process has seen of it in the last hour,
// for the charts.
func (h *handler) queueJSON(ctx context.Context, w http.ResponseWriter, r *http.Request, q *prioq.Queue) error {
	v, err := h.read(ctx, q, r.URL.Query())
	if err != nil {
		return err
	}
	m := statsMap(v.Stats)
	m["at"] = v.At.UnixMilli()
	m["reliable"] = q.Mode() == prioq.AtLeastOnce
	peek := []map[string]any{}
	for _, p := range v.Peek {
		peek = append(peek, map[string]any{"id": p.ID, "priority": p.Priority, "attempts": p.Attempts,
			"enqueued": p.EnqueuedAt.UnixMilli(), "payload": payload(p.Payload, h.cfg.ShowPayloads)})
	}
	delayed := []map[string]any{}
	for _, d := range v.Delayed {
		delayed = append(delayed, map[string]any{"id": d.ID, "priority": d.Priority, "attempts": d.Attempts,
			"due": d.Due.UnixMilli(), "payload": payload(d.Payload, h.cfg.ShowPayloads)})
	}
	leased := []map[string]any{}
	for _, l := range v.Leased {
		leased = append(leased, map[string]any{"id": l.ID, "priority": l.Priority, "attempts": l.Attempts,
			"taken": l.TakenAt.UnixMilli(), "deadline": l.LeaseDeadline.UnixMilli(), "holder": v.HolderOf(l.Holder),
			"payload": payload(l.Payload, h.cfg.ShowPayloads)})
	}
	m["delayed_messages"], m["leased"] = delayed, leased
	m["pages"] = v.Pages
	dead := []map[string]any{}
	for _, d := range v.Dead {
		dead = append(dead, map[string]any{"id": d.ID, "priority": d.Priority, "attempts": d.Attempts,
			"died": d.DiedAt.UnixMilli(), "reason": d.Reason, "payload": payload(d.Payload, h.cfg.ShowPayloads)})
	}
	groups := []map[string]any{}
	for _, g := range v.Groups {
		groups = append(groups, map[string]any{"group": g.Group, "ready": g.Ready, "in_flight": g.InFlight,
			"limit": g.Limit, "rate": g.Rate.String(), "rate_set": g.Rate.N != 0, "parked": g.Parked, "rate_parked": g.RateParked})
	}
	workers := []map[string]any{}
	for _, wk := range v.Workers {
		workers = append(workers, map[string]any{"id": wk.ID, "kind": wk.Kind, "host": wk.Host, "pid": wk.PID,
			"process": wk.Process, "holder": wk.Holder, "queues": len(wk.Queues), "in_flight": wk.InFlight, "concurrency": wk.Concurrency,
			"delivered": wk.Delivered, "started": wk.Started.UnixMilli(), "last_seen": wk.LastSeen.UnixMilli()})
	}
	m["workers"], m["workers_error"], m["idle"] = workers, v.WorkersErr, v.Idle()
	m["schedules"], m["schedules_error"] = schedulesJSON(v.Schedules), v.SchedulesErr
	m["peek"], m["dead_letters"], m["top_groups"] = peek, dead, groups
	if r.URL.Query().Get("history") == "1" {
		stored, _ := q.History(ctx, v.At.Add(-historySpan)) // none when it cannot be read
		m["history"] = withStored(stored, h.hist.of(q.Name()))
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(m)
}

// schedulesJSON is the Schedules table's rows: times in unix ms, 0 for none.
func schedulesJSON(list []prioq.ScheduleInfo) []map[string]any {
	out := []map[string]any{}
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	for _, s := range list {
		out = append(out, map[string]any{"name": s.Name, "spec": s.Spec, "next": ms(s.Next), "last": ms(s.LastFired)})
	}
	return out
}
