package store

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
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
	PlaceFinished
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

	// In flight: what its handler last reported (Progress), if anything.
	Progress    Progressed
	HasProgress bool

	// Finished: its retained record (retain.go).
	Record Record
}

// findBudget is how many entries one find.lua call reads of a list at most
// (fewer once it read 1 MiB of them: find.lua), and findHashCount the COUNT
// of its HSCAN of the in-flight records (a hint: a small hash comes whole):
// a call blocks the server for about the time LRANGE of that many entries
// takes.
const (
	findBudget    = 500
	findHashCount = 50
)

// Find looks for the message id in the shard, reading only: the delayed
// messages, the ready ones, those in flight, the delayed ones again (a
// delivery retried while the others were read), then the dead letters.
// Found.Place is PlaceNone when none has the id. Each step is a bounded
// call (find.lua reads at most findBudget entries of a list, fewer once it
// read 1 MiB, and HSCANs findHashCount in-flight records), never one long
// script, so Redis goes on serving others between them. What each place
// costs (a "page": findBudget entries, or 1 MiB of them):
//   - delayed: O(1), two round trips (the dstore record, its due time);
//   - ready: O(ready messages of the shard), a round trip per page (at
//     least one) of each lane, priority list and group list
//     (reached through its marker, or its group's parked entry), one per
//     findBudget entries of a segment's index (Range), an HSCAN of the
//     parked groups and of gready, and a pipeline per findBudget lists
//     probed for the groups of which no list was read (their markers moved
//     past the search);
//   - in flight: O(in flight), a round trip per findHashCount records;
//   - dead: O(dead letters), a round trip per page of them;
//   - finished (a retained record, retain.go): O(1), looked at last, so a
//     message requeued or enqueued again under its id is found live.
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
	steps := []func(context.Context, string) (Found, error){s.findDelayed, s.findReady, s.findInFlight, s.findDelayed, s.findDead, s.findFinished}
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
		return Found{}, dropWrongType(err)
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
		return Found{}, dropWrongType(err) // nil: promoted meanwhile, the next steps look
	}
	f := Found{Info: InfoOf(e), Place: PlaceDelayed}
	if ms, err := strconv.ParseFloat(*due, 64); err == nil {
		f.Due = time.UnixMilli(int64(ms))
	}
	return f, nil
}

// dropWrongType is err, but nil for a key of the wrong type: the search
// passes such a key by.
func dropWrongType(err error) error {
	if IsWrongType(err) {
		return nil
	}
	return err
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

// findIn runs find.lua on keys[0] (of Redis type typ) from at.
func (s *Shard) findIn(ctx context.Context, keys []string, typ, id, at string) (findPage, error) {
	count := findBudget
	if typ == "hash" {
		count = findHashCount
	}
	var raw [][]byte
	if err := s.do(ctx, findScript.Cmd(&raw, keys, id, typ, at, strconv.Itoa(count))); err != nil {
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

// hscan reads the hash key whole, a page at a time, and calls fn on each
// field and value until fn finds the message. A key of another type is
// passed by.
func (s *Shard) hscan(ctx context.Context, key string, fn func(k, v string) (Found, error)) (Found, error) {
	for cur := "0"; ; {
		var reply []any
		if err := s.do(ctx, radix.Cmd(&reply, "HSCAN", key, cur, "COUNT", strconv.Itoa(findBudget))); err != nil {
			return Found{}, dropWrongType(err)
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
			f.Progress, f.HasProgress, err = s.ProgressOf(ctx, h.place)
			return f, err
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

// findFinished looks for a retained record: O(1).
func (s *Shard) findFinished(ctx context.Context, id string) (Found, error) {
	r, ok, err := s.Finished(ctx, id)
	if err != nil || !ok {
		return Found{}, err
	}
	return Found{Info: Info{ID: id, Attempts: r.Attempts, EnqueuedAt: r.Enqueued}, Place: PlaceFinished, Record: r}, nil
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
