package dashboard

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Action is what a request asks of the dashboard, as Config.Authorize sees
// it.
type Action string

// The actions. View covers every page and endpoint that only reads; the
// others change a queue, and each has its own confirmation page.
const (
	// View reads: the list, a queue's page, the JSON endpoints, the assets,
	// and the confirmation pages (which read counts).
	View Action = "view"
	// Pause stops a queue's consumers from taking messages.
	Pause Action = "pause"
	// Resume lets them take again.
	Resume Action = "resume"
	// Requeue moves one dead letter back to its lane.
	Requeue Action = "requeue"
	// RequeueAll moves every dead letter of a queue back.
	RequeueAll Action = "requeue-all"
	// PurgeDead deletes every dead letter of a queue.
	PurgeDead Action = "purge-dead"
	// Purge deletes every waiting (ready and delayed) message of a queue.
	Purge Action = "purge"
	// RunNow makes one delayed message ready at once (prioq.Queue.RunNow).
	RunNow Action = "run-now"
	// Cancel deletes one waiting message by id (prioq.Queue.Cancel).
	Cancel Action = "cancel"
)

// actions are the state-changing actions, in the order a queue's page shows
// them.
var actions = []Action{Pause, Resume, Requeue, RequeueAll, PurgeDead, Purge, RunNow, Cancel}

func knownAction(s string) (Action, bool) {
	for _, a := range actions {
		if string(a) == s {
			return a, true
		}
	}
	return "", false
}

var (
	// ErrUnauthenticated, returned (wrapped) by Config.Authorize, answers
	// 401 with a Basic challenge, so that a browser asks for a user name and
	// a password.
	ErrUnauthenticated = errors.New("dashboard: authentication required")
	// ErrForbidden, returned (wrapped) by Config.Authorize, answers 403 with
	// the error's text. Any other error answers the same.
	ErrForbidden = errors.New("dashboard: forbidden")
)

// Credentials are the secrets a request must present, as an Authorize hook
// (prioq web uses it): a request that presents one of them may do every
// action, one that presents none is refused with ErrUnauthenticated. With no
// secret set, every request is refused.
type Credentials struct {
	// Token is accepted as "Authorization: Bearer <Token>" (scripts), and as
	// the password of basic auth with any user name (browsers).
	Token string

	// User and Password are accepted as basic auth.
	User, Password string
}

// Authorize is a Config.Authorize hook: nil for a request that presents the
// credentials, an error wrapping ErrUnauthenticated for any other. Secrets
// are compared in constant time, and never appear in an error.
func (c Credentials) Authorize(r *http.Request, _ Action, _ string) error {
	auth := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(auth, "Bearer "); ok && c.Token != "" && same(tok, c.Token) {
		return nil
	}
	if user, pass, ok := r.BasicAuth(); ok {
		// Both compared, whatever the first gives: no timing tells which
		// part was wrong.
		okUser, okPass := same(user, c.User), same(pass, c.Password)
		if c.Password != "" && okUser && okPass {
			return nil
		}
		if c.Token != "" && same(pass, c.Token) {
			return nil
		}
	}
	if auth == "" {
		return ErrUnauthenticated
	}
	return fmt.Errorf("%w: wrong credentials", ErrUnauthenticated)
}

// same compares two secrets in constant time, lengths included (the hashes
// have one length).
func same(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// authorize asks Config.Authorize whether r may do a to queue ("" for what
// concerns no queue). ReadOnly refuses every action but View; without a
// hook, so does the dashboard: reads are open, actions need a hook that
// says who may do them.
func (h *handler) authorize(r *http.Request, a Action, queue string) error {
	if a != View && h.cfg.ReadOnly {
		return fmt.Errorf("%w: the dashboard is read-only (Config.ReadOnly; prioq web --read-only)", ErrForbidden)
	}
	if h.cfg.Authorize == nil {
		if a == View {
			return nil
		}
		return fmt.Errorf("%w: nobody may act without an Authorize hook (Config.Authorize; prioq web: without credentials)", ErrForbidden)
	}
	return h.cfg.Authorize(r, a, queue)
}

// allow reports whether r may do a to queue, and answers the request when
// it may not: 401 with a Basic challenge when it is not authenticated (the
// hook's words are not shown: they may tell what was wrong), else 403.
func (h *handler) allow(w http.ResponseWriter, r *http.Request, a Action, queue string) bool {
	err := h.authorize(r, a, queue)
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Basic realm="prioq dashboard", charset="UTF-8"`)
		http.Error(w, "authentication required", http.StatusUnauthorized)
	default:
		http.Error(w, err.Error(), http.StatusForbidden)
	}
	return false
}

// csp allows the dashboard's own script, style and fetches, nothing inline,
// no plugin, no framing, and forms that post to itself only.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// guard wraps the routes with what every request goes through: the security
// headers, the Host check, the refusal to be framed, and net/http's
// cross-origin protection of unsafe methods (Sec-Fetch-Site).
func (h *handler) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection().Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin") // so that actions carry a Referer, and nothing leaves
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		hd.Set("Cache-Control", "no-store")
		if !h.hostAllowed(r) {
			// A name that resolves to this server but is not one it is
			// served under: a DNS rebinding, or a proxy not declared.
			http.Error(w, fmt.Sprintf("Host %q is not one the dashboard is served under (Config.Hosts; prioq web --host)", r.Host),
				http.StatusMisdirectedRequest)
			return
		}
		switch r.Header.Get("Sec-Fetch-Dest") {
		case "iframe", "frame", "embed", "object", "fencedframe":
			http.Error(w, "the dashboard is not shown inside another page", http.StatusForbidden)
			return
		}
		cop.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether r's Host names this server: one of
// Config.Hosts ("*": any), the address the request arrived on, or localhost
// when that address is a loopback one. A DNS rebinding names the attacker's
// domain, which is none of these.
func (h *handler) hostAllowed(r *http.Request) bool {
	host := hostname(r.Host)
	if host == "" {
		return false
	}
	for _, a := range h.cfg.Hosts {
		if a == "*" || hostname(a) == host {
			return true
		}
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if !ok {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.Equal(local.IP)
	}
	return host == "localhost" && local.IP.IsLoopback()
}

// hostname is the host of a Host header or an address, without its port,
// brackets or final dot, in lower case.
func hostname(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	return strings.ToLower(host)
}

// sameOrigin checks that an action comes from the dashboard's own pages:
// its Origin (or, when a browser sends none or "null", its Referer) names
// the host the request was sent to. Browsers send Origin with every POST;
// a forged cross-site form or a script elsewhere cannot set it.
func sameOrigin(r *http.Request) error {
	from := r.Header.Get("Origin")
	if from == "" || from == "null" {
		from = r.Header.Get("Referer")
	}
	if from == "" {
		return errors.New("an action needs an Origin or Referer header (browsers send one): none was sent")
	}
	u, err := url.Parse(from)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Errorf("an action from %q is refused: actions come from the dashboard's own pages", from)
	}
	return nil
}
