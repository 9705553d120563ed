package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/prioq/prioq"
)

// workersView is one reading of the worker registry: every live consumer,
// or, with Config.Queues, those serving one of them (their queue lists cut
// to those: the dashboard names no other queue).
type workersView struct {
	At      time.Time
	Workers []prioq.Worker
}

func (h *handler) readWorkers(ctx context.Context) (workersView, error) {
	ws, err := prioq.Workers(ctx, h.cfg.Client)
	if err != nil {
		return workersView{}, err
	}
	if h.fixed != nil {
		kept := ws[:0]
		for _, w := range ws {
			w.Queues = slices.DeleteFunc(slices.Clone(w.Queues), func(q string) bool { return !h.fixed[q] })
			if len(w.Queues) > 0 {
				w.Pattern = ""
				kept = append(kept, w)
			}
		}
		ws = kept
	}
	return workersView{At: time.Now(), Workers: ws}, nil
}

// workersOf reads the registry for a request allowed to view, or answers
// the request itself (refused, failed) and returns false.
func (h *handler) workersOf(w http.ResponseWriter, r *http.Request) (workersView, bool) {
	if !h.allow(w, r, View, "") {
		return workersView{}, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.CallTimeout)
	defer cancel()
	v, err := h.readWorkers(ctx)
	if err != nil {
		h.fail(w, err)
		return workersView{}, false
	}
	return v, true
}

func (h *handler) workersPage(w http.ResponseWriter, r *http.Request) {
	if v, ok := h.workersOf(w, r); ok {
		h.render(w, "workers.html", v)
	}
}

func (h *handler) workersJSON(w http.ResponseWriter, r *http.Request) {
	v, ok := h.workersOf(w, r)
	if !ok {
		return
	}
	rows := []map[string]any{}
	for _, wk := range v.Workers {
		rows = append(rows, map[string]any{"id": wk.ID, "kind": wk.Kind, "host": wk.Host, "pid": wk.PID,
			"process": wk.Process, "holder": wk.Holder, "queues": wk.Queues, "pattern": wk.Pattern, "in_flight": wk.InFlight,
			"concurrency": wk.Concurrency, "delivered": wk.Delivered, "started": wk.Started.UnixMilli(),
			"last_seen": wk.LastSeen.UnixMilli()})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"at": v.At.UnixMilli(), "workers": rows})
}
