// Package dashboard is a web dashboard for prioq queues: a mountable
// http.Handler that shows each queue's lanes, delayed, in-flight and dead
// messages, charts depth and rates live, peeks at the next messages, browses
// dead letters, shows one message's page (its state, times and headers, its
// payload on request: /q/{queue}/message?id=ID, linked from every table),
// and can requeue or purge dead letters, run a delayed message now, cancel
// a waiting one, purge a queue, and pause or resume it.
//
//	h, err := dashboard.New(dashboard.Config{
//		Client:    client,
//		Authorize: func(r *http.Request, a dashboard.Action, queue string) error { ... },
//		Hosts:     []string{"ops.example.com"},
//	})
//	mux.Handle("/queues/", http.StripPrefix("/queues", h))
//
// It shows every queue on the client, found again as pages ask (a queue
// created after New appears within QueueListTTL and its page works at once),
// or only Config.Queues.
//
// # Security
//
// Safe by default, to be put on a network:
//   - Who may do what is Config.Authorize's: asked for every request with the
//     Action it wants (View for anything that reads) and the queue. Without
//     it, the dashboard is read-only: reads are open (the host program may
//     put its own authentication in front), actions are refused.
//     Credentials is such a hook for a token or a user and password.
//   - Every request's Host must name the server: the address it arrived on,
//     localhost on loopback, or Config.Hosts. A DNS rebinding (a foreign
//     name resolving to this server) is answered 421 and reads nothing.
//   - Every action is a POST from the dashboard's own page: its Origin (or
//     Referer) must be the dashboard's, its Sec-Fetch-Site not cross-site
//     (net/http's CrossOriginProtection), and it must carry the per-process
//     CSRF token; and it must be confirmed: each action has a confirmation
//     page saying what it does and to how many messages, and a POST that
//     did not come from it is sent there.
//   - No page can be framed (Content-Security-Policy frame-ancestors 'none',
//     X-Frame-Options DENY; a request a browser makes for a frame is
//     refused), and the policy allows no inline script or style.
//   - Payloads are hidden unless ShowPayloads is set (they may hold personal
//     data). Everything it serves is embedded: nothing is fetched from
//     anywhere at run time.
package dashboard

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prioq/prioq"
)

//go:embed templates/*.html static/*
var files embed.FS

// Defaults.
const (
	// DefaultCallTimeout bounds each page's Redis calls.
	DefaultCallTimeout = 5 * time.Second
	// QueueListTTL is how long the list of queues found on the client is
	// reused before it is read again (a SCAN of every primary).
	QueueListTTL = 2 * time.Second
)

// Config configures the dashboard. The zero value of every field but Client
// selects its default.
type Config struct {
	// Client is the Redis client the queues live on.
	Client prioq.Client

	// Queues, when set, are the only queues shown and served (each opened
	// with the layout and mode stored in Redis; one not created yet has a
	// page once it is). Empty: every queue on Client, found by a SCAN of
	// every primary at most every QueueListTTL.
	Queues []string

	// Authorize decides whether the request r may do action a to the queue
	// named ("" for the list and the assets): nil lets it, an error wrapping
	// ErrUnauthenticated answers 401 with a Basic challenge, any other error
	// 403. It is asked for every request, and for each action a page offers
	// (an action it refuses is not offered). nil (the default): read-only,
	// every View allowed and every other action refused.
	Authorize func(r *http.Request, a Action, queue string) error

	// Hosts are the names the dashboard is served under, checked against
	// every request's Host (DNS rebinding): needed behind a reverse proxy or
	// for a DNS name. The address a request arrived on, and localhost when
	// it is a loopback one, are always accepted. "*" accepts any Host (when
	// a proxy in front checks it).
	Hosts []string

	// ReadOnly refuses every action that changes state, whatever
	// Authorize says, and shows none.
	ReadOnly bool

	// ShowPayloads shows message payloads in peeks and dead letters.
	ShowPayloads bool

	// CallTimeout bounds each page's Redis calls. Defaults to
	// DefaultCallTimeout.
	CallTimeout time.Duration
}

type handler struct {
	cfg   Config
	tmpl  *template.Template
	csrf  string
	mux   *http.ServeMux
	fixed map[string]bool // Config.Queues, when set

	mu     sync.Mutex
	opened map[string]*prioq.Queue

	listMu sync.Mutex // held while the list is read, so that one SCAN serves every waiting request
	list   []string
	listAt time.Time

	snapMu sync.Mutex
	snap   map[string]queueRow // every queue's figures, for sorts by depth
	snapAt time.Time

	hist history
}

// New returns the dashboard's handler.
func New(cfg Config) (http.Handler, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: dashboard needs a client", prioq.ErrInvalidOption)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	tmpl, err := template.New("").Funcs(template.FuncMap{
		"payload": func(b []byte) string { return payload(b, cfg.ShowPayloads) },
		"ago":     func(t, now time.Time) string { return max(now.Sub(t), 0).Round(time.Second).String() },
		// path is a queue name as one segment of a URL path: "team/alpha"
		// is team%2Falpha, "a?b" a%3Fb, "c#d" c%23d, "50%" 50%25.
		"path":   url.PathEscape,
		"clock":  func(t time.Time) string { return t.Format("15:04:05") },
		"utc":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") },
		"oldest": oldest,
	}).ParseFS(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	token := make([]byte, 32) // one random CSRF token per process
	_, _ = rand.Read(token)
	h := &handler{cfg: cfg, tmpl: tmpl, csrf: hex.EncodeToString(token), mux: http.NewServeMux(),
		opened: map[string]*prioq.Queue{}}
	if len(cfg.Queues) > 0 {
		h.fixed = map[string]bool{}
		for _, q := range cfg.Queues {
			h.fixed[q] = true
		}
	}
	h.mux.HandleFunc("GET /{$}", h.index)
	h.mux.HandleFunc("GET /api/queues", h.indexJSON)
	h.mux.HandleFunc("GET /workers", h.workersPage)
	h.mux.HandleFunc("GET /api/workers", h.workersJSON)
	h.mux.HandleFunc("GET /q/{name}", h.onQueue(h.queuePage))
	h.mux.HandleFunc("GET /api/stats/{name}", h.onQueue(h.statsJSON))
	h.mux.HandleFunc("GET /api/queue/{name}", h.onQueue(h.queueJSON))
	h.mux.HandleFunc("GET /q/{name}/message", h.onQueue(h.messagePage))
	h.mux.HandleFunc("GET /q/{name}/{action}", h.onQueue(h.confirmPage))
	h.mux.HandleFunc("POST /q/{name}/{action}", h.act)
	static := http.FileServerFS(files)
	h.mux.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		if h.allow(w, r, View, "") {
			w.Header().Del("Cache-Control") // the assets hold no data
			static.ServeHTTP(w, r)
		}
	})
	return h.guard(h.mux), nil
}

// names returns the names of the queues to list, sorted: Config.Queues, or
// the queues found on the client, read again when older than QueueListTTL.
func (h *handler) names(ctx context.Context) ([]string, error) {
	if h.fixed != nil {
		names := slices.Clone(h.cfg.Queues)
		slices.Sort(names)
		return slices.Compact(names), nil
	}
	h.listMu.Lock()
	defer h.listMu.Unlock()
	if h.listAt.IsZero() || time.Since(h.listAt) > QueueListTTL {
		names, err := scanQueues(ctx, h.cfg.Client)
		if err != nil {
			return nil, err
		}
		h.list, h.listAt = names, time.Now()
	}
	return h.list, nil
}

// open returns the queue, opened (three round trips) on its first use only.
// Any queue on the client can be opened, unless Config.Queues restricts
// them: one created after New has a page at once.
func (h *handler) open(ctx context.Context, name string) (*prioq.Queue, error) {
	if h.fixed != nil && !h.fixed[name] {
		return nil, fmt.Errorf("%w: queue %q is not one this dashboard shows", prioq.ErrNotFound, name)
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
	if errors.Is(err, prioq.ErrNotFound) || errors.Is(err, prioq.ErrInvalidName) {
		code = http.StatusNotFound
	}
	if errors.Is(err, errBadPage) {
		code = http.StatusBadRequest
	}
	http.Error(w, err.Error(), code)
}

// onQueue serves a request about the queue named in its path, once
// Authorize lets it View that queue: it opens the queue with the call
// timeout and reports failures as HTTP errors.
func (h *handler) onQueue(serve func(ctx context.Context, w http.ResponseWriter, r *http.Request, q *prioq.Queue) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if !h.allow(w, r, View, name) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.CallTimeout)
		defer cancel()
		q, err := h.open(ctx, name)
		if err == nil {
			err = serve(ctx, w, r, q)
		}
		if err != nil {
			h.fail(w, err)
		}
	}
}

func (h *handler) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := h.tmpl.ExecuteTemplate(w, name, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// payload is a payload as the dashboard shows it: quoted, or only its size.
func payload(b []byte, show bool) string {
	if !show {
		return fmt.Sprintf("(%d bytes hidden)", len(b))
	}
	return strconv.Quote(string(b))
}
