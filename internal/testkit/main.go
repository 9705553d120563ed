package testkit

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/redisfind"
)

// RunWithRedis is a TestMain body for a package whose tests share one Redis:
// it finds or starts one (redisfind), gives set a pool of size connections
// on it (and its address), runs the tests, and stops what it started. It
// returns the exit code.
func RunWithRedis(m *testing.M, size int, set func(addr string, c radix.Client)) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := redisfind.Find(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "these tests need Redis:", err)
		return 1
	}
	defer srv.Stop()
	client, err := Pool(ctx, srv.Addr, size, radix.Dialer{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pool:", err)
		return 1
	}
	defer client.Close()
	set(srv.Addr, client)
	return m.Run()
}
