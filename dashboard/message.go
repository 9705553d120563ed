package dashboard

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prioq/prioq"
)

// maxShownPayload bounds the payload a message page shows on request: the
// first 64 KiB, quoted.
const maxShownPayload = 64 << 10

// header is one header of a message, for its page.
type header struct{ Key, Value string }

// messagePage shows one message found by id wherever it is
// (Queue.Message): its state and what the state says, its headers and
// times; its payload only when asked (?payload=1) and ShowPayloads allows
// payloads at all, bounded by maxShownPayload. A delayed message offers
// Run now and Cancel, a ready one Cancel, through their confirmations.
func (h *handler) messagePage(ctx context.Context, w http.ResponseWriter, r *http.Request, q *prioq.Queue) error {
	id := r.URL.Query().Get("id")
	st, err := q.Message(ctx, id)
	if errors.Is(err, prioq.ErrInvalidID) {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil
	}
	if err != nil {
		return err
	}
	data := map[string]any{"Queue": q.Name(), "M": st, "At": time.Now(), "Shards": q.Shards() > 1,
		"Payloads": h.cfg.ShowPayloads}
	var hs []header
	for k, v := range st.Headers {
		hs = append(hs, header{k, v})
	}
	slices.SortFunc(hs, func(a, b header) int { return cmp.Compare(a.Key, b.Key) })
	data["Headers"] = hs
	if h.cfg.ShowPayloads && r.URL.Query().Get("payload") == "1" {
		shown := st.Payload[:min(len(st.Payload), maxShownPayload)]
		data["Payload"] = strconv.Quote(string(shown))
		data["Cut"] = len(shown) < len(st.Payload)
	}
	if f := st.Finished; f != nil && h.cfg.ShowPayloads && r.URL.Query().Get("payload") == "1" {
		data["Result"] = strconv.Quote(string(f.Value[:min(len(f.Value), maxShownPayload)]))
	}
	if st.State == prioq.MessageInFlight {
		ws, werr := prioq.Workers(ctx, h.cfg.Client)
		data["Holder"] = holderOf(st.Holder, ws, werr == nil)
	}
	waiting := st.State == prioq.MessageDelayed || st.State == prioq.MessageReady
	data["CanRunNow"] = st.State == prioq.MessageDelayed && h.authorize(r, RunNow, q.Name()) == nil
	data["CanCancel"] = waiting && h.authorize(r, Cancel, q.Name()) == nil
	h.render(w, "message.html", data)
	return nil
}
