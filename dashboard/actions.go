package dashboard

import (
	"context"
	"crypto/hmac"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prioq/prioq"
)

// findDeadPages bounds how far the confirmation of a requeue looks for its
// dead letter: 20 pages of 500.
const findDeadPages = 20

// confirmation is what an action's confirmation page says: what it does,
// and to how many messages, counted when the page was made.
type confirmation struct {
	Queue   string
	Action  Action
	Title   string
	What    string
	Button  string
	Count   int64
	ID      string
	At      time.Time
	CSRF    string
	Refused string // why the action cannot be done now
}

// confirm counts what action a would change in q.
func confirm(ctx context.Context, q *prioq.Queue, a Action, id string) (confirmation, error) {
	c := confirmation{Queue: q.Name(), Action: a, ID: id}
	st, err := q.Stats(ctx)
	if err != nil {
		return c, err
	}
	c.At = time.Now()
	name := strconv.Quote(q.Name())
	switch a {
	case Pause:
		c.Count = st.Ready
		c.Title = "Pause the consumers of " + name + "?"
		c.What = fmt.Sprintf("Consumers stop taking messages: the %d ready message(s) wait until it is resumed, "+
			"the %d in flight finish, producers keep enqueueing.", st.Ready, st.InFlight)
		c.Button = fmt.Sprintf("Pause (%d ready wait)", st.Ready)
		if st.Paused {
			c.Refused = "it is paused already"
		}
	case Resume:
		c.Count = st.Ready
		c.Title = "Resume the consumers of " + name + "?"
		c.What = fmt.Sprintf("Consumers take messages again: %d ready message(s) become available to them.", st.Ready)
		c.Button = fmt.Sprintf("Resume (%d ready)", st.Ready)
		if !st.Paused {
			c.Refused = "it is not paused"
		}
	case Requeue:
		c.Count = 1
		c.Title = "Requeue the dead letter " + strconv.Quote(id) + "?"
		d, found, err := findDead(ctx, q, id)
		if err != nil {
			return c, err
		}
		if !found {
			return c, fmt.Errorf("%w: no dead letter %q in %s", prioq.ErrNotFound, id, name)
		}
		c.What = fmt.Sprintf("1 message goes back to the tail of its lane: priority %d, %d attempt(s), died %v ago: %s.",
			d.Priority, d.Attempts, c.At.Sub(d.DiedAt).Round(time.Second), strconv.Quote(d.Reason))
		c.Button = "Requeue 1 dead letter"
	case RequeueAll:
		c.Count = st.Dead
		c.Title = "Requeue every dead letter of " + name + "?"
		c.What = fmt.Sprintf("%d dead letter(s) go back to the tails of their lanes (those that died since are requeued too).", st.Dead)
		c.Button = fmt.Sprintf("Requeue %d dead letter(s)", st.Dead)
	case PurgeDead:
		c.Count = st.Dead
		c.Title = "Delete every dead letter of " + name + "?"
		c.What = fmt.Sprintf("%d dead letter(s) are deleted for good (those that died since are deleted too), and their ids released.", st.Dead)
		c.Button = fmt.Sprintf("Delete %d dead letter(s)", st.Dead)
	case Purge:
		c.Count = st.Ready + st.Delayed
		c.Title = "Delete every waiting message of " + name + "?"
		c.What = fmt.Sprintf("%d ready and %d delayed message(s), %d in all, are deleted for good (those enqueued since too); "+
			"the %d in flight and the %d dead stay.", st.Ready, st.Delayed, c.Count, st.InFlight, st.Dead)
		c.Button = fmt.Sprintf("Delete %d waiting message(s)", c.Count)
	case RunNow, Cancel:
		c.Count = 1
		d, found, err := findDelayed(ctx, q, id)
		if err != nil {
			return c, err
		}
		if a == RunNow {
			c.Title = "Run the delayed message " + strconv.Quote(id) + " now?"
			if !found {
				return c, fmt.Errorf("%w: no delayed message %q in %s", prioq.ErrNotFound, id, name)
			}
			c.What = fmt.Sprintf("1 message, due in %v, becomes ready at once: priority %d, %d attempt(s) before.",
				d.Due.Sub(c.At).Round(time.Second), d.Priority, d.Attempts)
			c.Button = "Run 1 message now"
		} else {
			c.Title = "Cancel the message " + strconv.Quote(id) + "?"
			c.What = "1 waiting message (ready or delayed) is deleted for good and its id released; one in flight or dead is not."
			if found {
				c.What = fmt.Sprintf("1 delayed message, due in %v, is deleted for good and its id released.", d.Due.Sub(c.At).Round(time.Second))
			}
			c.Button = "Cancel 1 message"
		}
	}
	if c.Count == 0 && a != Pause && a != Resume && c.Refused == "" {
		c.Refused = "there is nothing to " + string(a)
	}
	if q.Mode() != prioq.AtLeastOnce && a != Purge && a != RunNow && a != Cancel {
		c.Refused = "an at-most-once queue has no " + map[bool]string{true: "pause", false: "dead letters"}[a == Pause || a == Resume]
	}
	return c, nil
}

// findDead looks for the dead letter id, a page at a time.
func findDead(ctx context.Context, q *prioq.Queue, id string) (prioq.DeadLetter, bool, error) {
	const page = 500
	for p := 0; p < findDeadPages; p++ {
		letters, err := q.DeadLetters(ctx, p*page, page)
		if err != nil {
			return prioq.DeadLetter{}, false, err
		}
		for _, d := range letters {
			if d.ID == id {
				return d, true, nil
			}
		}
		if len(letters) < page {
			break
		}
	}
	return prioq.DeadLetter{}, false, nil
}

// findDelayed looks for the delayed message id, a page at a time.
func findDelayed(ctx context.Context, q *prioq.Queue, id string) (prioq.ScheduledMessage, bool, error) {
	const page = 500
	for p := 0; p < findDeadPages; p++ {
		msgs, err := q.Scheduled(ctx, p*page, page)
		if err != nil {
			return prioq.ScheduledMessage{}, false, err
		}
		for _, m := range msgs {
			if m.ID == id {
				return m, true, nil
			}
		}
		if len(msgs) < page {
			break
		}
	}
	return prioq.ScheduledMessage{}, false, nil
}

// confirmPage is an action's confirmation: a GET that changes nothing, and
// a form that posts the action with the count it showed.
func (h *handler) confirmPage(ctx context.Context, w http.ResponseWriter, r *http.Request, q *prioq.Queue) error {
	a, ok := knownAction(r.PathValue("action"))
	if !ok {
		http.NotFound(w, r)
		return nil
	}
	if !h.allow(w, r, a, q.Name()) {
		return nil
	}
	c, err := confirm(ctx, q, a, r.URL.Query().Get("id"))
	if err != nil {
		return err
	}
	c.CSRF = h.csrf
	h.render(w, "confirm.html", c)
	return nil
}

// act does an action posted from its confirmation page, then sends the
// browser back to the queue's page with what it did. It is refused unless
// Authorize allows it, it comes from the dashboard's own page (Origin or
// Referer), and carries the CSRF token; one without the count its
// confirmation showed is sent to the confirmation.
func (h *handler) act(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	a, ok := knownAction(r.PathValue("action"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	if !h.allow(w, r, a, name) {
		return
	}
	if err := sameOrigin(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(h.csrf)) {
		http.Error(w, "missing or wrong CSRF token", http.StatusForbidden)
		return
	}
	id := r.FormValue("id")
	expect := r.PostFormValue("expect")
	if _, err := strconv.ParseInt(expect, 10, 64); err != nil {
		// Not from the confirmation page: there.
		to := url.PathEscape(a.String())
		if id != "" {
			to += "?id=" + url.QueryEscape(id)
		}
		w.Header().Set("Location", to)
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.CallTimeout)
	defer cancel()
	q, err := h.open(ctx, name)
	if err != nil {
		h.fail(w, err)
		return
	}
	var n int64
	switch a {
	case Pause:
		err = q.Pause(ctx)
	case Resume:
		err = q.Resume(ctx)
	case Requeue:
		err, n = q.RequeueDead(ctx, id), 1
	case RequeueAll:
		n, err = q.RequeueAllDead(ctx)
	case PurgeDead:
		n, err = q.PurgeDead(ctx)
	case Purge:
		n, err = q.Purge(ctx)
	case RunNow:
		err, n = q.RunNow(ctx, id), 1
	case Cancel:
		err, n = q.Cancel(ctx, id), 1
	}
	if err != nil {
		h.fail(w, err)
		return
	}
	done := url.Values{"done": {string(a)}, "n": {strconv.FormatInt(n, 10)}, "expect": {expect}}
	if id != "" {
		done.Set("id", id)
	}
	// A relative Location, resolved by the browser against the request's
	// own URL (…/q/<name>/<action>), so that it works under whatever prefix
	// the app mounts the dashboard (http.Redirect would make it absolute
	// from the stripped path).
	w.Header().Set("Location", "../"+url.PathEscape(name)+"?"+done.Encode())
	w.WriteHeader(http.StatusSeeOther)
}

func (a Action) String() string { return string(a) }
