package dashboard

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
)

// Paging of a queue page's state tables (delayed, in flight, dead letters):
// each one's first row is a query parameter, so a page, its live updates
// (the poll sends the page's own query) and a link all show the same rows.
// The ready table shows the next messages only: messages ready are read in
// take order from the heads of the lanes, which has no cheap deep page.
var pagedTables = []struct{ param, noun string }{
	{"delayed_from", "delayed"},
	{"inflight_from", "in flight"},
	{"dead_from", "dead"},
}

// maxPageFrom is the deepest first row a table pages to: a page of a queue
// of several shards reads that many entries of each shard's index, every
// poll (prioq show and prioq peek --from reach further).
const maxPageFrom = 100_000

// errBadPage is a page parameter that is not a row number: answered 400.
var errBadPage = errors.New("dashboard: bad page")

// offsets are the first rows asked for, by parameter.
type offsets map[string]int

func pageOffsets(q url.Values) (offsets, error) {
	off := offsets{}
	for _, t := range pagedTables {
		s := q.Get(t.param)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxPageFrom {
			return nil, fmt.Errorf("%w: %s=%q is not a row number (0 to %d)", errBadPage, t.param, s, maxPageFrom)
		}
		off[t.param] = n
	}
	return off, nil
}

// pageNav is what a table's heading says of its page: "21–40 of 64" and
// the links to the pages before and after ("" when there is none), which
// keep the other tables' pages.
type pageNav struct {
	Param, Text, Prev, Next string
}

func navOf(q url.Values, off offsets, param string, rows int, total int64, size int) pageNav {
	from := off[param]
	nav := pageNav{Param: param, Text: fmt.Sprintf("%d of %d", rows, total)}
	if from > 0 || int64(rows) < total {
		nav.Text = fmt.Sprintf("%d–%d of %d", min(from+1, from+rows), from+rows, total)
		if rows == 0 {
			nav.Text = fmt.Sprintf("none from %d, of %d", from+1, total)
		}
	}
	link := func(at int) string {
		v := url.Values{}
		for k, vs := range q {
			if k != "history" { // the poll's own, not the page's
				v[k] = vs
			}
		}
		if at == 0 {
			v.Del(param)
		} else {
			v.Set(param, strconv.Itoa(at))
		}
		if len(v) == 0 {
			return "?"
		}
		return "?" + v.Encode()
	}
	if from > 0 {
		nav.Prev = link(max(0, from-size))
	}
	if int64(from+rows) < total {
		nav.Next = link(from + size)
	}
	return nav
}
