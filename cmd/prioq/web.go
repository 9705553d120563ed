package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prioq/prioq/dashboard"
)

// hostsFlag collects --host.
type hostsFlag []string

func (h *hostsFlag) String() string     { return strings.Join(*h, ",") }
func (h *hostsFlag) Set(v string) error { *h = append(*h, v); return nil }

// web serves the dashboard until ctx is done (Ctrl-C). Without credentials
// it is read-only and refuses to listen anywhere but on loopback; with
// them, every request must present them. It listens before it says where,
// so that an address it cannot have is an error, not a URL that fails.
func web(ctx context.Context, c redisClient, args []string, w io.Writer) error {
	fs := newFlags("web")
	addr := fs.String("addr", "127.0.0.1:8080", "")
	readOnly := fs.Bool("read-only", false, "")
	payloads := fs.Bool("payloads", false, "")
	token := fs.String("token", os.Getenv("PRIOQ_WEB_TOKEN"), "")
	basic := fs.String("basic-auth", os.Getenv("PRIOQ_WEB_BASIC_AUTH"), "")
	var hosts hostsFlag
	fs.Var(&hosts, "host", "")
	names, err := parse(fs, args, -1)
	if err != nil {
		return err
	}
	creds := dashboard.Credentials{Token: *token}
	if *basic != "" {
		user, pass, ok := strings.Cut(*basic, ":")
		if !ok || user == "" || pass == "" {
			return bad("web: --basic-auth (or $PRIOQ_WEB_BASIC_AUTH) wants user:password (the value is not shown)")
		}
		creds.User, creds.Password = user, pass
	}
	authed := creds.Token != "" || creds.Password != ""
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return bad("web: --addr %q: %v", *addr, err)
	}
	if !authed && !loopback(ctx, host) {
		return bad("web: refusing to listen on %s without credentials: it is not a loopback address, and anyone who reaches it "+
			"would see every queue. Set $PRIOQ_WEB_TOKEN or $PRIOQ_WEB_BASIC_AUTH (user:password), or listen on 127.0.0.1", *addr)
	}
	cfg := dashboard.Config{Client: c, Queues: names, ReadOnly: *readOnly, ShowPayloads: *payloads, Hosts: hosts}
	if ip := net.ParseIP(host); ip == nil && host != "" && host != "localhost" {
		cfg.Hosts = append(cfg.Hosts, host) // the name it was told to listen on
	}
	if authed {
		cfg.Authorize = creds.Authorize
	}
	h, err := dashboard.New(cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err // "address already in use", without the op and address said below
		}
		return bad("web: cannot listen on %s: %v", *addr, err)
	}
	if !authed && !l.Addr().(*net.TCPAddr).IP.IsLoopback() { // what the name resolved to when listening
		l.Close()
		return bad("web: refusing to listen on %s (%s) without credentials: not a loopback address", *addr, l.Addr())
	}
	what := "every queue"
	if len(names) > 0 {
		what = fmt.Sprintf("%d queue(s)", len(names))
	}
	access := "credentials required"
	switch {
	case *readOnly && authed:
		access += ", read-only (--read-only)"
	case *readOnly:
		access = "read-only (--read-only)"
	case !authed:
		access = "read-only: no credentials ($PRIOQ_WEB_TOKEN or $PRIOQ_WEB_BASIC_AUTH allow actions)"
	}
	fmt.Fprintf(w, "dashboard of %s on http://%s/ (%s)\n", what, l.Addr(), access)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// loopback reports whether host names loopback addresses only: 127.0.0.1,
// ::1, or a name that resolves to nothing else. "" and 0.0.0.0 (every
// interface) are not.
func loopback(ctx context.Context, host string) bool {
	if host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return false
		}
	}
	return true
}
