package store

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// Place is where Find found a message.
type Place int

// The places of a message.
const (
	PlaceNone Place = iota
	PlaceReady
	PlaceDelayed
	PlaceInFlight
	PlaceDead
)

// Found is a message Find found: where it is, and what its place says.
type Found struct {
	Info
	Place Place

	// Ready: its lane (Levels: its level; Range: its segment), how many
	// entries are before it in the list that holds it (its lane, its
	// priority's list, or its group's list), and whether its group is
	// parked at a limit (its marker out of the lanes).
	Lane, Ahead int
	Parked      bool

	// Delayed: when it is due.
	Due time.Time

	// In flight: its lease's deadline and token, and when it was taken.
	Deadline, TakenAt time.Time
	Token             string

	// Dead: why and when, and the stored bytes when they did not decode.
	Reason string
	DiedAt time.Time
	Raw    []byte
}

// findBudget is how many entries one find.lua call reads at most: a call
// blocks the server for about the time LRANGE of that many entries takes.
const findBudget = 500

// Find looks for the message id in the shard, reading only: the delayed
// messages, the ready ones, those in flight, the delayed ones again (a
// delivery retried while the others were read), then the dead letters.
// Found.Place is PlaceNone when none has the id. Each step is a bounded
// call (find.lua reads at most findBudget entries), never one long script,
// so Redis goes on serving others between them. What each place costs:
//   - delayed: O(1), two round trips (the dstore record, its due time);
//   - ready: O(ready messages of the shard), a round trip per findBudget
//     entries of each lane, priority list and group list, and one per
//     non-empty priority index page (Range), per parked group and per
//     group whose list was not reached through its marker;
//   - in flight: O(in flight), HSCAN of the in-flight records;
//   - dead: O(dead letters), a round trip per findBudget of them.
//
// The steps are not one atomic read: the order follows a message's life
// (ready, then in flight, then retried or dead), and lists are read from
// their tail, so that takes and pushes move no entry past the search (see
// find.lua). A message that goes back to a place already searched meanwhile
// (a lease that expires into its lane, a dead letter requeued, a retry
// promoted during the search) can be missed: PlaceNone, ask again. A
// message is never reported in two places: the first place found is the
// answer. Records that do not decode, and keys of the wrong type, are
// passed by.
func (s *Shard) Find(ctx context.Context, id string) (Found, error) {
	steps := []func(context.Context, string) (Found, error){s.findDelayed, s.findReady, s.findInFlight, s.findDelayed, s.findDead}
	for _, step := range steps {
		f, err := step(ctx, id)
		if err != nil || f.Place != PlaceNone {
			if err != nil {
				err = fmt.Errorf("prioq: find %q in %q: %w", id, s.name, err)
			}
			return f, err
		}
	}
	return Found{}, nil
}

// findDelayed looks in the delayed messages: O(1).
func (s *Shard) findDelayed(ctx context.Context, id string) (Found, error) {
	var rec []byte
	if err := s.do(ctx, radix.Cmd(&rec, "HGET", s.k.dstore, id)); err != nil || rec == nil {
		return Found{}, err
	}
	// "lane|score|" seq‖envelope: the delayed set's member is seq‖id.
	e, ok := envelopeIn(rec, true)
	starts := unknownLaneStarts(rec)
	if !ok || e.ID != id || len(starts) < 3 {
		return Found{}, nil
	}
	member := string(rec[starts[1]:starts[2]]) + id
	var due *string
	if err := s.do(ctx, radix.Cmd(&due, "ZSCORE", s.k.delayed, member)); err != nil || due == nil {
		return Found{}, err // promoted meanwhile: the next steps look
	}
	f := Found{Info: InfoOf(e), Place: PlaceDelayed}
	if ms, err := strconv.ParseFloat(*due, 64); err == nil {
		f.Due = time.UnixMilli(int64(ms))
	}
	return f, nil
}

// findHit is an entry find.lua found the id's bytes in: its place (or
// lease token), the entry, and a lease deadline.
type findHit struct {
	place string
	entry []byte
	score string
}

// findPage is one find.lua reply.
type findPage struct {
	ok     bool // false: no such key, or one of another type
	next   string
	hits   []findHit
	groups []string
}

// findIn runs find.lua on key (of Redis type typ) from at.
func (s *Shard) findIn(ctx context.Context, keys []string, typ, id, at string) (findPage, error) {
	var raw [][]byte
	if err := s.do(ctx, findScript.Cmd(&raw, keys, id, typ, at, strconv.Itoa(findBudget))); err != nil {
		return findPage{}, err
	}
	if len(raw) < 4 {
		return findPage{}, fmt.Errorf("%w: find.lua replied %d values", ErrCorrupt, len(raw))
	}
	p := findPage{ok: string(raw[0]) == "ok", next: string(raw[1])}
	n, err := strconv.Atoi(string(raw[3]))
	if err != nil || 4+3*n > len(raw) {
		return findPage{}, fmt.Errorf("%w: find.lua replied %d hits in %d values", ErrCorrupt, n, len(raw))
	}
	for i := range n {
		at := 4 + 3*i
		p.hits = append(p.hits, findHit{string(raw[at]), raw[at+1], string(raw[at+2])})
	}
	for _, g := range raw[4+3*n:] {
		p.groups = append(p.groups, string(g))
	}
	return p, nil
}

// findList searches the list (or, typ "zset", the segment) key from its
// tail to its head, findBudget entries a call, until match accepts a hit.
// It returns the groups whose markers it read. A key of another type is
// passed by.
func (s *Shard) findList(ctx context.Context, key, typ, id string, match func(findHit) (Found, bool)) (Found, []string, error) {
	var groups []string
	for at := "0"; at != ""; {
		p, err := s.findIn(ctx, []string{key}, typ, id, at)
		if err != nil || !p.ok {
			return Found{}, groups, err
		}
		for _, h := range p.hits {
			if f, ok := match(h); ok {
				return f, groups, nil
			}
		}
		groups = append(groups, p.groups...)
		at = p.next
	}
	return Found{}, groups, nil
}

// readyMatch accepts a hit whose entry is the envelope (seq‖envelope in a
// segment, seq) of message id, in lane.
func readyMatch(id string, lane int, seq bool, parked bool) func(findHit) (Found, bool) {
	return func(h findHit) (Found, bool) {
		b := h.entry
		if seq {
			var err error
			if b, err = segmentEnvelope(b); err != nil {
				return Found{}, false
			}
		}
		e, err := DecodeEnvelope(b)
		if err != nil || e.ID != id {
			return Found{}, false
		}
		ahead, _ := strconv.Atoi(h.place)
		return Found{Info: InfoOf(e), Place: PlaceReady, Lane: lane, Ahead: ahead, Parked: parked}, true
	}
}

// readySearch is the state of one search of the ready messages: the group
// lists searched, and the lists beside which a group's list may lie.
type readySearch struct {
	s        *Shard
	id       string
	searched map[string]bool
	beside   []string // lanes (Levels), priority lists (Range)
	laneOf   map[string]int
}

// findReady looks in the lanes, highest first, with the group lists their
// markers name, then in the lists of the groups parked at a limit, then in
// those of the groups with messages waiting whose markers the search did
// not read (moved to a lane's tail by a take meanwhile).
func (s *Shard) findReady(ctx context.Context, id string) (Found, error) {
	r := &readySearch{s: s, id: id, searched: map[string]bool{}, laneOf: map[string]int{}}
	for _, lane := range s.k.highFirst {
		n, _ := s.k.LaneOf(lane)
		var f Found
		var err error
		switch {
		case s.lists():
			f, err = r.segment(ctx, lane, n)
		case s.isRange():
			f, _, err = s.findList(ctx, lane, "zset", id, readyMatch(id, n, true, false))
		default:
			f, err = r.list(ctx, lane, n)
		}
		if err != nil || f.Place != PlaceNone {
			return f, err
		}
	}
	if s.isRange() && !s.lists() {
		return Found{}, nil // (no groups)
	}
	if f, err := r.parked(ctx); err != nil || f.Place != PlaceNone {
		return f, err
	}
	return r.unreached(ctx)
}

// list searches a list that holds messages and markers (a lane, a
// priority's list), then the lists of the groups whose markers it holds.
func (r *readySearch) list(ctx context.Context, key string, lane int) (Found, error) {
	r.beside = append(r.beside, key)
	r.laneOf[key] = lane
	f, groups, err := r.s.findList(ctx, key, "list", r.id, readyMatch(r.id, lane, false, false))
	if err != nil || f.Place != PlaceNone {
		return f, err
	}
	for _, g := range groups {
		if f, err := r.group(ctx, key+groupListTag+g, lane, false); err != nil || f.Place != PlaceNone {
			return f, err
		}
	}
	return Found{}, nil
}

// group searches a group's list, once.
func (r *readySearch) group(ctx context.Context, glist string, lane int, parked bool) (Found, error) {
	if r.searched[glist] {
		return Found{}, nil
	}
	r.searched[glist] = true
	f, _, err := r.s.findList(ctx, glist, "list", r.id, readyMatch(r.id, lane, false, parked))
	return f, err
}

// segment searches the priority lists a Range segment's index names, from
// its lowest priority (its tail) up, a page of the index at a time.
func (r *readySearch) segment(ctx context.Context, index string, lane int) (Found, error) {
	for done := 0; ; done += findBudget {
		var prios []string
		end := strconv.Itoa(-done - 1)
		if err := r.s.do(ctx, radix.Cmd(&prios, "ZRANGE", index, strconv.Itoa(-done-findBudget), end)); err != nil {
			if strings.HasPrefix(err.Error(), "WRONGTYPE") {
				return Found{}, nil // passed by
			}
			return Found{}, err
		}
		for _, m := range prios {
			p, err := strconv.ParseInt(m, 10, 64)
			if err != nil || strconv.FormatInt(p, 10) != m {
				continue // no list (keys.go)
			}
			if f, err := r.list(ctx, r.s.k.prioList(p), lane); err != nil || f.Place != PlaceNone {
				return f, err
			}
		}
		if len(prios) < findBudget {
			return Found{}, nil
		}
	}
}

// hscan reads the hash key whole, a page at a time, and calls fn on each
// field and value until fn finds the message. A key of another type is
// passed by.
func (s *Shard) hscan(ctx context.Context, key string, fn func(k, v string) (Found, error)) (Found, error) {
	for cur := "0"; ; {
		var reply []any
		if err := s.do(ctx, radix.Cmd(&reply, "HSCAN", key, cur, "COUNT", strconv.Itoa(findBudget))); err != nil {
			if strings.HasPrefix(err.Error(), "WRONGTYPE") {
				return Found{}, nil
			}
			return Found{}, err
		}
		if len(reply) != 2 {
			return Found{}, fmt.Errorf("%w: HSCAN replied %d values", ErrCorrupt, len(reply))
		}
		kv, _ := reply[1].([]any)
		for i := 0; i+1 < len(kv); i += 2 {
			if f, err := fn(anyString(kv[i]), anyString(kv[i+1])); err != nil || f.Place != PlaceNone {
				return f, err
			}
		}
		if cur = anyString(reply[0]); cur == "0" || cur == "" {
			return Found{}, nil
		}
	}
}

// anyString is a bulk string of a reply decoded into an interface.
func anyString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}

// parked searches the lists of the groups parked at a limit: gpark names
// the lists their markers came out of.
func (r *readySearch) parked(ctx context.Context) (Found, error) {
	return r.s.hscan(ctx, r.s.k.gpark, func(g, entries string) (Found, error) {
		for _, entry := range strings.Fields(entries) {
			ns, score, ok := strings.Cut(entry, "|")
			n, err := strconv.Atoi(ns)
			if !ok || err != nil || n < 0 || n >= len(r.s.k.lanes) {
				continue // names no list (lua/inc/parkentry.lua)
			}
			list := r.s.k.lanes[n]
			if r.s.lists() {
				sc, err := strconv.ParseInt(score, 10, 64)
				if err != nil {
					continue
				}
				list = r.s.k.prioList(-sc)
			}
			if f, err := r.group(ctx, list+groupListTag+g, n, true); err != nil || f.Place != PlaceNone {
				return f, err
			}
		}
		return Found{}, nil
	})
}

// unreached searches the lists of the groups with messages waiting (gready)
// that the search has not read: a take that served a group moved its
// marker to the tail of its list, past the search, meanwhile. Their lists
// can lie beside any list searched: one pipeline of TYPE per group.
func (r *readySearch) unreached(ctx context.Context) (Found, error) {
	return r.s.hscan(ctx, r.s.k.gready, func(g, count string) (Found, error) {
		if c, err := strconv.Atoi(count); err != nil || c <= 0 {
			return Found{}, nil
		}
		var cand []string
		for _, b := range r.beside {
			if l := b + groupListTag + g; !r.searched[l] {
				cand = append(cand, l)
			}
		}
		if len(cand) == 0 {
			return Found{}, nil
		}
		types := make([]string, len(cand))
		if err := r.s.doPipeline(ctx, func() *radix.Pipeline {
			p := radix.NewPipeline()
			for i, l := range cand {
				p.Append(radix.Cmd(&types[i], "TYPE", l))
			}
			return p
		}); err != nil {
			return Found{}, err
		}
		for i, l := range cand {
			if types[i] != "list" {
				continue
			}
			lane := r.laneOf[strings.TrimSuffix(l, groupListTag+g)]
			if f, err := r.group(ctx, l, lane, false); err != nil || f.Place != PlaceNone {
				return f, err
			}
		}
		return Found{}, nil
	})
}

// findInFlight looks in the in-flight records (HSCAN by find.lua, which
// reads each hit's lease deadline with it).
func (s *Shard) findInFlight(ctx context.Context, id string) (Found, error) {
	for at := "0"; ; {
		p, err := s.findIn(ctx, []string{s.k.inflight, s.k.leases}, "hash", id, at)
		if err != nil || !p.ok {
			return Found{}, err
		}
		for _, h := range p.hits {
			e, ok := envelopeIn(h.entry, false)
			if !ok || e.ID != id {
				continue
			}
			f := Found{Info: InfoOf(e), Place: PlaceInFlight, Token: h.place, TakenAt: TokenTime(h.place)}
			if ms, err := strconv.ParseFloat(h.score, 64); err == nil {
				f.Deadline = time.UnixMilli(int64(ms))
			}
			return f, nil
		}
		if at = p.next; at == "0" || at == "" {
			return Found{}, nil
		}
	}
}

// findDead looks in the dead letters, the newest first.
func (s *Shard) findDead(ctx context.Context, id string) (Found, error) {
	f, _, err := s.findList(ctx, s.k.dead, "list", id, func(h findHit) (Found, bool) {
		d, err := parseDead(h.entry)
		if err != nil || d.ID != id {
			return Found{}, false
		}
		return Found{Info: d.Info, Place: PlaceDead, Reason: d.Reason, DiedAt: d.DiedAt, Raw: d.Raw}, true
	})
	return f, err
}

// TokenTime is when the take of lease token tok ran: its first 13 hex
// digits, µs of the server's clock (lua/take.lua); zero when it says none.
func TokenTime(tok string) time.Time {
	if len(tok) < 13 {
		return time.Time{}
	}
	us, err := strconv.ParseInt(tok[:13], 16, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

//go:embed lua/find.lua
var findSrc string
var findScript = newScript(findSrc)
