package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/testkit"
)

// rediss:// to a server that speaks plain text says it is TLS that failed,
// and why, at once rather than after a timeout; to a TLS server whose
// certificate is not trusted, that the TLS handshake failed on it.
func TestTLSErrorsSayTLS(t *testing.T) {
	start := time.Now()
	_, errOut, code := prioqRun(t, nil, "", "--url", "rediss://"+addr, "queues", "--no-rates")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "TLS handshake failed")
	assert.Contains(t, errOut, "the server answers in plain text, it does not serve TLS on this port")
	assert.Less(t, time.Since(start), 4500*time.Millisecond, "before the connection's 5 s timeout")
	t.Logf("%s", errOut)

	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	_, errOut, code = prioqRun(t, nil, "", "--url", "rediss://"+strings.TrimPrefix(srv.URL, "https://"), "queues", "--no-rates")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "TLS handshake failed")
	assert.Contains(t, errOut, "certificate")
	t.Logf("%s", errOut)
}

// Every error says "prioq:" once, however many layers of prioq wrapped it
// (the library prefixes each: "prioq: enqueue "q": prioq: invalid
// priority"), and on one line.
func TestOnePrefixPerError(t *testing.T) {
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(3)})
	other := testkit.QueueName(t)
	_, err := prioq.Open(context.Background(), client, other, prioq.Config{Layout: prioq.Levels(2)})
	require.NoError(t, err)
	for _, args := range [][]string{
		{"enqueue", q.Name(), "--priority", "7", "x"},
		{"enqueue", q.Name(), "--id", "has space", "x"},
		{"enqueue", q.Name(), "--group", "a b", "x"},
		{"cancel", q.Name(), "no-such-id"},
		{"dead", q.Name(), "requeue", "no-such-id"},
		{"create", other, "--layout", "levels:3"},
		{"limit", q.Name(), "acme", "1", "--rate", "2000000/1s"},
		{"stats", "no-such-queue-here"},
	} {
		_, errOut, code := prioqCmd(t, "", args...)
		assert.NotZero(t, code, "%v", args)
		assert.Equal(t, 1, strings.Count(errOut, "prioq:"), "%v: %q", args, errOut)
		assert.True(t, strings.HasPrefix(errOut, "prioq: "), "%v: %q", args, errOut)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "%v: one line: %q", args, errOut)
	}
}
