package store

import (
	"context"
	"strconv"
	"strings"

	"github.com/mediocregopher/radix/v4"
)

// find_ready.go: Find's search of the ready messages (find.go).

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
	searched map[string]bool // group lists
	groups   map[string]bool // groups with a list searched
	beside   []string        // lanes (Levels), priority lists (Range)
	laneOf   map[string]int
}

// findReady looks in the lanes, highest first, with the group lists their
// markers name, then in the lists of the groups parked at a limit, then in
// those of the groups with messages waiting whose markers the search did
// not read (moved to a lane's tail by a take meanwhile).
func (s *Shard) findReady(ctx context.Context, id string) (Found, error) {
	r := &readySearch{s: s, id: id, searched: map[string]bool{}, groups: map[string]bool{}, laneOf: map[string]int{}}
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
		if f, err := r.group(ctx, key, g, lane, false); err != nil || f.Place != PlaceNone {
			return f, err
		}
	}
	return Found{}, nil
}

// group searches the list of group g beside list (its marker's), once.
func (r *readySearch) group(ctx context.Context, list, g string, lane int, parked bool) (Found, error) {
	glist := list + groupListTag + g
	if r.searched[glist] {
		return Found{}, nil
	}
	r.searched[glist], r.groups[g] = true, true
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
			return Found{}, dropWrongType(err)
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
			if f, err := r.group(ctx, list, g, n, true); err != nil || f.Place != PlaceNone {
				return f, err
			}
		}
		return Found{}, nil
	})
}

// unreached searches the lists of the groups with messages waiting (gready)
// of which the search read no list: a take that served such a group moved
// its marker to the tail of its list, past the search, meanwhile. Their
// lists can lie beside any list searched: a pipeline of TYPE per 500 of
// them finds which exist.
func (r *readySearch) unreached(ctx context.Context) (Found, error) {
	var missed []string
	if _, err := r.s.hscan(ctx, r.s.k.gready, func(g, count string) (Found, error) {
		if c, err := strconv.Atoi(count); err == nil && c > 0 && !r.groups[g] {
			missed = append(missed, g)
		}
		return Found{}, nil
	}); err != nil || len(missed) == 0 {
		return Found{}, err
	}
	type cand struct{ list, g string }
	var cands []cand
	for _, g := range missed {
		for _, b := range r.beside {
			cands = append(cands, cand{b, g})
		}
	}
	for len(cands) > 0 {
		page := cands[:min(len(cands), findBudget)]
		cands = cands[len(page):]
		types := make([]string, len(page))
		if err := r.s.doPipeline(ctx, func() *radix.Pipeline {
			p := radix.NewPipeline()
			for i, c := range page {
				p.Append(radix.Cmd(&types[i], "TYPE", c.list+groupListTag+c.g))
			}
			return p
		}); err != nil {
			return Found{}, err
		}
		for i, c := range page {
			if types[i] != "list" {
				continue
			}
			if f, err := r.group(ctx, c.list, c.g, r.laneOf[c.list], false); err != nil || f.Place != PlaceNone {
				return f, err
			}
		}
	}
	return Found{}, nil
}
