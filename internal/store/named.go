package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/mediocregopher/radix/v4"
)

// namedPush is one push into a list that an index must name: vals go to
// list, and index gets member name with score; lane, when not "", is then
// named in the filled index.
type namedPush struct {
	list, index, score, name string
	lane                     string
	vals                     []string
}

// namedPush is the push of a message of lane and priority prio: into the
// list of prio, named in lane's segment index (Range, format 4; and the
// segment in the filled index, format 5), or into lane, named in the filled
// index (Levels, format 5).
func (s *Shard) namedPush(lane int, prio int64) namedPush {
	n := strconv.Itoa(lane)
	if !s.lists() {
		return namedPush{list: s.k.lanes[lane], index: s.k.filled, score: "-" + n, name: n}
	}
	u := namedPush{list: s.k.prioList(prio), index: s.k.lanes[lane], score: scoreOf(prio), name: fmtInt(prio)}
	if s.filled() {
		u.lane = n
	}
	return u
}

// namedTx makes pushes into named lists visible (Range of format 4, Levels
// of format 5), for the plain enqueue and the AtMostOnce put-back: each push
// and the ZADD naming its list go in one transaction, so that a cut
// connection or a full Redis (which refuses the whole EXEC) cannot leave a
// list no index names. A command's own error (a key of the wrong type) does
// not undo the others: results takes back out what was pushed into a Range
// priority's list whose name was refused. A level whose name was refused
// (a filled index of the wrong type) keeps its messages: takes pass such an
// index by and pop over every lane (take.lua).
type namedTx struct {
	s      *Shard
	cmd    string // RPUSH (enqueue) or LPUSH (put-back)
	pushes []namedPush
	exec   []any // the transaction's replies
}

// appendTo appends the transaction to p.
func (t *namedTx) appendTo(p *radix.Pipeline) {
	p.Append(radix.Cmd(nil, "MULTI"))
	for _, u := range t.pushes {
		p.Append(radix.Cmd(nil, t.cmd, append([]string{u.list}, u.vals...)...))
		p.Append(radix.Cmd(nil, "ZADD", u.index, u.score, u.name))
		if u.lane != "" {
			p.Append(radix.Cmd(nil, "ZADD", t.s.k.filled, "-"+u.lane, u.lane))
		}
	}
	p.Append(radix.Cmd(&t.exec, "EXEC"))
}

// results gives, once the pipeline holding the transaction returned err,
// each push's list length after it (0: not stored, or not known when err
// is not a reply) and why it was not stored. Replies are read only after a
// reply: an abandoned call may still write them. A push whose name was
// refused can only have met a segment key of the wrong type (a full Redis
// or a moving slot refuses the whole EXEC), so it is not named again: its
// values are taken back out (LREM; envelopes are unique), with a deadline
// of its own, as the caller's may be what ended the call.
func (t *namedTx) results(ctx context.Context, err error) (lengths []int64, errs []error) {
	lengths, errs = make([]int64, len(t.pushes)), make([]error, len(t.pushes))
	// Each push's replies: the push, its name, and the filled index's.
	at, n := make([]int, len(t.pushes)), 0
	for i, u := range t.pushes {
		at[i] = n
		n += 2
		if u.lane != "" {
			n++
		}
	}
	if !(err == nil || isReply(err)) || len(t.exec) != n {
		return lengths, errs
	}
	from := "-1" // RPUSH: the values are at the tail
	if t.cmd == "LPUSH" {
		from = "1"
	}
	for i, u := range t.pushes {
		if e, ok := t.exec[at[i]].(error); ok {
			errs[i] = e
			continue
		}
		lengths[i], _ = t.exec[at[i]].(int64)
		// (The filled index's refusal hides nothing: takes pass such an
		// index by, see namedTx.)
		refused, ok := t.exec[at[i]+1].(error)
		if !ok || u.index == t.s.k.filled {
			continue
		}
		key := u.list
		lengths[i], errs[i] = 0, fmt.Errorf("naming %s in its segment's index: %w", key, refused)
		p := radix.NewPipeline()
		for _, v := range u.vals {
			p.Append(radix.Cmd(nil, "LREM", key, from, v))
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.s.cfg.CallTimeout)
		if uerr := t.s.do(cctx, p); uerr != nil {
			errs[i] = fmt.Errorf("%w; taking its messages back out failed too, they wait unseen in %s: %w", errs[i], key, uerr)
		}
		cancel()
	}
	return lengths, errs
}
