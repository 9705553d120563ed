package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/fanout"
)

type queueRow struct {
	Name     string
	Stats    prioq.Stats
	Reliable bool // AtLeastOnce: acks are counted
	Err      string
	// Consumers is how many live consumers serve it (the worker
	// registry); -1 when the registry could not be read.
	Consumers int
}

// Idle reports a queue with ready work that no live consumer serves.
func (r queueRow) Idle() bool { return r.Err == "" && r.Consumers == 0 && r.Stats.Ready > 0 }

// countConsumers fills each row's Consumers from one reading of the worker
// registry.
func (h *handler) countConsumers(ctx context.Context, rows []queueRow) {
	ws, err := prioq.Workers(ctx, h.cfg.Client)
	for i := range rows {
		rows[i].Consumers = -1
		if err != nil {
			continue
		}
		rows[i].Consumers = 0
		for _, w := range ws {
			if w.Serves(rows[i].Name) {
				rows[i].Consumers++
			}
		}
	}
}

// The queue list's paging: rows per page by default and at most, and how
// long the figures behind a sort by depth may be reused.
const (
	defaultPerPage = 50
	maxPerPage     = 500
	snapshotTTL    = 5 * time.Second
	// snapshotTimeout bounds reading every queue's figures for a sort.
	snapshotTimeout = time.Minute
	statsWorkers    = 64
)

// sorts are the list's orders: by name (the default) needs the figures of
// one page only; the others the figures of every queue found (a snapshot,
// reused for snapshotTTL).
var sorts = map[string]func(a, b queueRow) int{
	"name":    func(a, b queueRow) int { return strings.Compare(a.Name, b.Name) },
	"ready":   func(a, b queueRow) int { return cmp.Compare(b.Stats.Ready, a.Stats.Ready) },
	"oldest":  func(a, b queueRow) int { return cmp.Compare(b.Stats.OldestReady, a.Stats.OldestReady) },
	"dead":    func(a, b queueRow) int { return cmp.Compare(b.Stats.Dead, a.Stats.Dead) },
	"delayed": func(a, b queueRow) int { return cmp.Compare(b.Stats.Delayed, a.Stats.Delayed) },
}

// listPage is one page of the queue list, as the page and its JSON show it.
type listPage struct {
	Queues       []queueRow
	Search, Sort string
	Page, Pages  int
	First, Last  int // the rows shown, from 1
	Found, Total int
	At           time.Time // when the figures were read
	Snapshot     bool      // the figures (and the order) are a reading of every queue, reused for snapshotTTL
	Prev, Next   string
	SortLinks    map[string]string
}

// listOf reads the page of the list that query asks for: ?q= keeps the
// names containing it, ?sort= orders them (name, ready, oldest, dead,
// delayed), ?page= and ?per= page them. ok is false for an unknown sort.
func (h *handler) listOf(r *http.Request) (lp listPage, ok bool, err error) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.CallTimeout)
	defer cancel()
	query := r.URL.Query()
	search, sortBy := query.Get("q"), cmp.Or(query.Get("sort"), "name")
	order := sorts[sortBy]
	if order == nil {
		return lp, false, nil
	}
	page, _ := strconv.Atoi(query.Get("page"))
	per, _ := strconv.Atoi(query.Get("per"))
	page, per = max(page, 1), min(cmp.Or(max(per, 0), defaultPerPage), maxPerPage)

	all, err := h.names(ctx)
	if err != nil {
		return lp, true, err
	}
	var names []string
	for _, n := range all {
		if strings.Contains(n, search) {
			names = append(names, n)
		}
	}
	pages := max(1, (len(names)+per-1)/per)
	page = min(page, pages)
	from, to := (page-1)*per, min(page*per, len(names))
	var rows []queueRow
	at := time.Now()
	if sortBy == "name" {
		rows = h.statsOf(ctx, names[from:to])
	} else {
		// A search reads what it found; the whole list, a snapshot. Either
		// may take longer than one page's CallTimeout: thousands of queues,
		// each opened once.
		sctx, scancel := context.WithTimeout(r.Context(), snapshotTimeout)
		defer scancel()
		found := h.statsOf(sctx, names)
		if len(names) == len(all) {
			found, at = h.snapshot(sctx, names)
			lp.Snapshot = true
		}
		// Queues whose figures could not be read go last, whatever the order.
		slices.SortStableFunc(found, func(a, b queueRow) int {
			return cmp.Or(cmp.Compare(failed(a), failed(b)), order(a, b), strings.Compare(a.Name, b.Name))
		})
		rows = found[from:to]
	}
	h.countConsumers(ctx, rows)
	link := func(p int, s string) string {
		v := url.Values{}
		if search != "" {
			v.Set("q", search)
		}
		if s != "name" {
			v.Set("sort", s)
		}
		if p > 1 {
			v.Set("page", strconv.Itoa(p))
		}
		if per != defaultPerPage {
			v.Set("per", strconv.Itoa(per))
		}
		return "?" + v.Encode()
	}
	lp = listPage{Queues: rows, Search: search, Sort: sortBy, Page: page, Pages: pages, First: from + 1, Last: to,
		Found: len(names), Total: len(all), At: at, SortLinks: map[string]string{}}
	if len(names) == 0 {
		lp.First = 0
	}
	for s := range sorts {
		lp.SortLinks[s] = link(1, s)
	}
	if page > 1 {
		lp.Prev = link(page-1, sortBy)
	}
	if page < pages {
		lp.Next = link(page+1, sortBy)
	}
	return lp, true, nil
}

func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	if !h.allow(w, r, View, "") {
		return
	}
	lp, ok, err := h.listOf(r)
	if !ok {
		http.Error(w, "unknown sort "+strconv.Quote(r.URL.Query().Get("sort")), http.StatusBadRequest)
		return
	}
	if err != nil {
		h.fail(w, err)
		return
	}
	h.render(w, "index.html", lp)
}

// indexJSON is the page of the list the same query asks for, which the
// list's script polls to keep every row live.
func (h *handler) indexJSON(w http.ResponseWriter, r *http.Request) {
	if !h.allow(w, r, View, "") {
		return
	}
	lp, ok, err := h.listOf(r)
	if !ok {
		http.Error(w, "unknown sort "+strconv.Quote(r.URL.Query().Get("sort")), http.StatusBadRequest)
		return
	}
	if err != nil {
		h.fail(w, err)
		return
	}
	rows := []map[string]any{}
	for _, q := range lp.Queues {
		row := map[string]any{"name": q.Name}
		if q.Err != "" {
			row["error"] = q.Err
		} else {
			st := statsMap(q.Stats)
			st["reliable"] = q.Reliable
			row["stats"] = st
			row["consumers"] = q.Consumers
			row["idle"] = q.Idle()
		}
		rows = append(rows, row)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"queues": rows, "found": lp.Found, "total": lp.Total,
		"first": lp.First, "last": lp.Last, "page": lp.Page, "pages": lp.Pages,
		"at": lp.At.UnixMilli(), "snapshot": lp.Snapshot})
}

// failed is 1 for a row whose figures could not be read, else 0.
func failed(r queueRow) int {
	if r.Err != "" {
		return 1
	}
	return 0
}

// statsOf reads the figures of the queues named, statsWorkers at a time,
// under ctx's one deadline: one after another, the last ones would run out
// of time behind a slow one.
func (h *handler) statsOf(ctx context.Context, names []string) []queueRow {
	rows := make([]queueRow, len(names))
	fanout.Each(len(names), statsWorkers, func(i int) {
		row := queueRow{Name: names[i]}
		q, err := h.open(ctx, names[i])
		if err == nil {
			row.Reliable = q.Mode() == prioq.AtLeastOnce
			row.Stats, err = q.Stats(ctx)
		}
		if err != nil {
			row.Err = err.Error()
		}
		rows[i] = row
	})
	return rows
}

// snapshot returns the figures of the queues named, from the last reading
// of every queue if it is younger than snapshotTTL, and when it was taken.
func (h *handler) snapshot(ctx context.Context, names []string) ([]queueRow, time.Time) {
	h.snapMu.Lock()
	defer h.snapMu.Unlock()
	if h.snapAt.IsZero() || time.Since(h.snapAt) > snapshotTTL || len(h.snap) != len(names) {
		rows := h.statsOf(ctx, names)
		h.snap = make(map[string]queueRow, len(rows))
		for _, r := range rows {
			h.snap[r.Name] = r
		}
		h.snapAt = time.Now()
	}
	out := make([]queueRow, len(names))
	for i, n := range names {
		r, ok := h.snap[n]
		if !ok {
			r = queueRow{Name: n, Err: "not read yet"}
		}
		out[i] = r
	}
	return out, h.snapAt
}

// scanQueues returns the names of every queue on c, sorted, found by SCAN
// of their meta keys on every primary (never KEYS), in snapshotTimeout at
// most.
func scanQueues(ctx context.Context, c prioq.Client) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	return prioq.ListQueues(ctx, c, "")
}
