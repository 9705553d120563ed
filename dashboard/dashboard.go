// Package dashboard is a web dashboard for prioq queues: a mountable
// http.Handler that shows each queue's lanes, delayed, in-flight and dead
// messages, charts depth live, peeks at the next messages, browses dead
// letters, and can requeue or purge them and pause or resume a queue.
//
// Mount it behind your own authentication: it has none of its own.
//
//	h, err := dashboard.New(dashboard.Config{Client: client, Queues: []string{"orders"}})
//	mux.Handle("/queues/", authenticate(http.StripPrefix("/queues", h)))
//
// Safe by default: state-changing actions are POST requests checked against
// cross-origin use (net/http's CrossOriginProtection) and a per-process CSRF
// token; ReadOnly removes them; payloads are hidden unless ShowPayloads is
// set (they may hold personal data). Everything it serves is embedded: no
// asset is fetched from anywhere at run time.
package dashboard

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/fanout"
)

//go:embed templates/*.html static/*
var files embed.FS

// Config configures the dashboard.
type Config struct {
	// Client is the Redis client the queues live on.
	Client prioq.Client

	// Queues are the names of the queues to show (opened with the layout
	// and mode stored in Redis).
	Queues []string

	// ReadOnly hides and refuses every action that changes state.
	ReadOnly bool

	// ShowPayloads shows message payloads in peeks and dead letters.
	ShowPayloads bool

	// CallTimeout bounds each page's Redis calls. Defaults to 5s.
	CallTimeout time.Duration
}

type handler struct {
	cfg   Config
	tmpl  *template.Template
	csrf  string
	mux   *http.ServeMux
	queue map[string]bool // the configured names

	mu     sync.Mutex
	opened map[string]*prioq.Queue

	snapMu sync.Mutex
	snap   map[string]queueRow // every queue's figures, for sorts by depth
	snapAt time.Time
}

// New returns the dashboard's handler.
func New(cfg Config) (http.Handler, error) {
	if cfg.Client == nil || len(cfg.Queues) == 0 {
		return nil, fmt.Errorf("%w: dashboard needs a client and at least one queue", prioq.ErrInvalidOption)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	tmpl, err := template.New("").Funcs(template.FuncMap{
		"pct": func(n, max int64) int64 {
			if max <= 0 {
				return 0
			}
			return n * 100 / max
		},
		"payload": func(b []byte) string {
			if !cfg.ShowPayloads {
				return fmt.Sprintf("(%d bytes hidden)", len(b))
			}
			return strconv.Quote(string(b))
		},
		"ago": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	}).ParseFS(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	token := make([]byte, 32) // one random CSRF token per process
	_, _ = rand.Read(token)
	h := &handler{cfg: cfg, tmpl: tmpl, csrf: hex.EncodeToString(token), mux: http.NewServeMux(),
		queue: map[string]bool{}, opened: map[string]*prioq.Queue{}}
	for _, q := range cfg.Queues {
		h.queue[q] = true
	}
	h.mux.HandleFunc("GET /{$}", h.index)
	h.mux.HandleFunc("GET /q/{name}", h.onQueue(h.queuePage))
	h.mux.HandleFunc("GET /api/stats/{name}", h.onQueue(h.statsJSON))
	h.mux.Handle("GET /static/", http.FileServerFS(files))
	for _, action := range []string{"pause", "resume", "requeue", "requeue-all", "purge-dead"} {
		h.mux.HandleFunc("POST /q/{name}/"+action, h.act(action))
	}
	return http.NewCrossOriginProtection().Handler(h.mux), nil
}

// open returns the queue, opened (three round trips) on its first use only.
func (h *handler) open(ctx context.Context, name string) (*prioq.Queue, error) {
	if !h.queue[name] {
		return nil, prioq.ErrNotFound
	}
	h.mu.Lock()
	q := h.opened[name]
	h.mu.Unlock()
	if q != nil {
		return q, nil
	}
	// Not under the lock: a list page opens many queues at once. Two
	// requests may open one queue twice; the second one kept is as good.
	q, err := prioq.OpenExisting(ctx, h.cfg.Client, name, prioq.Config{AllowEviction: true, CallTimeout: h.cfg.CallTimeout})
	if err == nil {
		h.mu.Lock()
		h.opened[name] = q
		h.mu.Unlock()
	}
	return q, err
}

func (h *handler) fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	if errors.Is(err, prioq.ErrNotFound) {
		code = http.StatusNotFound
	}
	http.Error(w, err.Error(), code)
}

type queueRow struct {
	Name  string
	Stats prioq.Stats
	Err   string
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

// index lists the queues a page at a time: ?q= keeps the names containing
// it, ?sort= orders them (name, ready, oldest, dead, delayed), ?page= and
// ?per= page them.
func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.CallTimeout)
	defer cancel()
	query := r.URL.Query()
	search, sortBy := query.Get("q"), cmp.Or(query.Get("sort"), "name")
	order := sorts[sortBy]
	if order == nil {
		http.Error(w, "unknown sort "+strconv.Quote(sortBy), http.StatusBadRequest)
		return
	}
	page, _ := strconv.Atoi(query.Get("page"))
	per, _ := strconv.Atoi(query.Get("per"))
	page, per = max(page, 1), min(cmp.Or(max(per, 0), defaultPerPage), maxPerPage)

	var names []string
	for _, n := range h.cfg.Queues {
		if strings.Contains(n, search) {
			names = append(names, n)
		}
	}
	pages := max(1, (len(names)+per-1)/per)
	page = min(page, pages)
	var rows []queueRow
	var asOf time.Time
	if sortBy == "name" {
		slices.Sort(names)
		rows = h.statsOf(ctx, names[(page-1)*per:min(page*per, len(names))])
	} else {
		// A search reads what it found; the whole list, a snapshot. Either
		// may take longer than one page's CallTimeout: thousands of queues,
		// each opened once.
		sctx, scancel := context.WithTimeout(r.Context(), snapshotTimeout)
		defer scancel()
		all, at := h.statsOf(sctx, names), time.Now()
		if len(names) == len(h.cfg.Queues) {
			all, at = h.snapshot(sctx, names)
		}
		// Queues whose figures could not be read go last, whatever the order.
		slices.SortStableFunc(all, func(a, b queueRow) int {
			return cmp.Or(cmp.Compare(failed(a), failed(b)), order(a, b), strings.Compare(a.Name, b.Name))
		})
		rows, asOf = all[(page-1)*per:min(page*per, len(all))], at
	}
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
	data := map[string]any{"Queues": rows, "Search": search, "Sort": sortBy, "Page": page, "Pages": pages,
		"Found": len(names), "Total": len(h.cfg.Queues), "SortLinks": map[string]string{}}
	for s := range sorts {
		data["SortLinks"].(map[string]string)[s] = link(1, s)
	}
	if page > 1 {
		data["Prev"] = link(page-1, sortBy)
	}
	if page < pages {
		data["Next"] = link(page+1, sortBy)
	}
	if !asOf.IsZero() {
		data["AsOf"] = time.Since(asOf).Round(time.Second).String()
	}
	h.render(w, "index.html", data)
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
	if h.snapAt.IsZero() || time.Since(h.snapAt) > snapshotTTL {
		rows := h.statsOf(ctx, h.cfg.Queues)
		h.snap = make(map[string]queueRow, len(rows))
		for _, r := range rows {
			h.snap[r.Name] = r
		}
		h.snapAt = time.Now()
	}
	out := make([]queueRow, len(names))
	for i, n := range names {
		out[i] = h.snap[n]
	}
	return out, h.snapAt
}

// onQueue serves a request about the queue named in its path: it opens the
// queue with the call timeout and reports failures as HTTP errors.
func (h *handler) onQueue(serve func(ctx context.Context, w http.ResponseWriter, r *http.Request, q *prioq.Queue) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.CallTimeout)
		defer cancel()
		q, err := h.open(ctx, r.PathValue("name"))
		if err == nil {
			err = serve(ctx, w, r, q)
		}
		if err != nil {
			h.fail(w, err)
		}
	}
}

type lane struct {
	Index int
	Count int64
}

// topGroups is how many groups a queue's page shows, the most loaded first.
const topGroups = 10

func (h *handler) queuePage(ctx context.Context, w http.ResponseWriter, _ *http.Request, q *prioq.Queue) error {
	st, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	peek, err := q.Peek(ctx, 20)
	if err != nil {
		return err
	}
	var dead []prioq.DeadLetter
	if q.Mode() == prioq.AtLeastOnce {
		if dead, err = q.DeadLetters(ctx, 0, 50); err != nil {
			return err
		}
	}
	var groups []prioq.GroupStats
	if q.Mode() == prioq.AtLeastOnce {
		if groups, err = q.Groups(ctx, topGroups); err != nil {
			return err
		}
	}
	var lanes []lane
	var max int64
	for i := len(st.Lanes) - 1; i >= 0; i-- {
		lanes = append(lanes, lane{i, st.Lanes[i]})
		if st.Lanes[i] > max {
			max = st.Lanes[i]
		}
	}
	h.render(w, "queue.html", map[string]any{
		"Q": q, "Stats": st, "Lanes": lanes, "Max": max, "Peek": peek, "Dead": dead, "Shards": st.Shards, "Groups": groups,
		"ReadOnly": h.cfg.ReadOnly, "CSRF": h.csrf, "Reliable": q.Mode() == prioq.AtLeastOnce,
	})
	return nil
}

func (h *handler) statsJSON(ctx context.Context, w http.ResponseWriter, _ *http.Request, q *prioq.Queue) error {
	st, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(map[string]any{"lanes": st.Lanes, "ready": st.Ready, "delayed": st.Delayed,
		"in_flight": st.InFlight, "dead": st.Dead, "oldest_ready_s": st.OldestReady.Seconds(), "paused": st.Paused,
		"enqueued": st.Enqueued, "acked": st.Acked, "reliable": q.Mode() == prioq.AtLeastOnce, "shards": shardsJSON(st)})
}

// shardsJSON is what the stats endpoint says of each shard of a queue of
// several.
func shardsJSON(st prioq.Stats) []map[string]any {
	var out []map[string]any
	for i, s := range st.Shards {
		out = append(out, map[string]any{"shard": i, "slot": s.Slot, "node": s.Node, "ready": s.Ready, "delayed": s.Delayed, "in_flight": s.InFlight, "dead": s.Dead})
	}
	return out
}

func (h *handler) act(action string) http.HandlerFunc {
	serve := h.onQueue(func(ctx context.Context, w http.ResponseWriter, r *http.Request, q *prioq.Queue) error {
		var err error
		switch action {
		case "pause":
			err = q.Pause(ctx)
		case "resume":
			err = q.Resume(ctx)
		case "requeue":
			err = q.RequeueDead(ctx, r.FormValue("id"))
		case "requeue-all":
			_, err = q.RequeueAllDead(ctx)
		case "purge-dead":
			_, err = q.PurgeDead(ctx)
		}
		if err != nil {
			return err
		}
		// A relative Location, resolved by the browser against the request's
		// own URL, so that it works under whatever prefix the app mounts the
		// dashboard (http.Redirect would make it absolute from the stripped
		// path).
		w.Header().Set("Location", "../"+url.PathEscape(q.Name()))
		w.WriteHeader(http.StatusSeeOther)
		return nil
	})
	return func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.ReadOnly {
			http.Error(w, "the dashboard is read-only", http.StatusForbidden)
			return
		}
		if !hmac.Equal([]byte(r.FormValue("csrf")), []byte(h.csrf)) {
			http.Error(w, "missing or wrong CSRF token", http.StatusForbidden)
			return
		}
		serve(w, r)
	}
}

func (h *handler) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
	if err := h.tmpl.ExecuteTemplate(w, name, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
