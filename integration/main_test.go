// Package integration runs prioq against Redis in Docker (dockertest), with
// faults injected into the container, and against a 3-primary Redis Cluster.
// It needs a Docker daemon; without one the tests skip, except under CI=true,
// where that fails. No image is pulled when none can be: internal/redisdocker
// builds a minimal one from the local redis-server binary.
package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/ory/dockertest/v3"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq/integration/internal/redisdocker"
	"github.com/prioq/prioq/internal/testkit"
)

var (
	dockerPool *dockertest.Pool
	dockerErr  error
	shared     *redisdocker.Container // one container for the tests that inject no fault
	sharedOnce sync.Once
	sharedErr  error
)

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role))
	}
	dockerPool, dockerErr = redisdocker.Connect()
	if dockerErr == nil {
		img, err := redisdocker.EnsureImage(dockerPool)
		if err != nil {
			dockerErr = err
		} else {
			fmt.Fprintln(os.Stderr, "integration: image", img.How)
		}
	}
	code := m.Run()
	if shared != nil {
		_ = shared.Purge()
	}
	os.Exit(code)
}

// needDocker skips the test when Docker is unreachable, or fails it under CI.
func needDocker(t *testing.T) *dockertest.Pool {
	t.Helper()
	if dockerErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Docker is required under CI=true: %v", dockerErr)
		}
		t.Skipf("skipping: %v", dockerErr)
	}
	return dockerPool
}

// sharedRedis is the package's container for tests that inject no fault.
func sharedRedis(t *testing.T) *redisdocker.Container {
	pool := needDocker(t)
	sharedOnce.Do(func() { shared, sharedErr = redisdocker.Run(pool, redisdocker.Options{Name: "shared"}) })
	require.NoError(t, sharedErr)
	return shared
}

// ownRedis is a container for one test, purged when it ends (also on failure).
func ownRedis(t *testing.T, args ...string) *redisdocker.Container {
	pool := needDocker(t)
	c, err := redisdocker.Run(pool, redisdocker.Options{Name: strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), Args: args})
	require.NoError(t, err)
	owned.Store(t.Name(), c)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("container log:\n%s", c.Logs())
		}
		_ = c.Purge()
	})
	return c
}

var owned sync.Map // test name -> its own container

// lastContainer is the container ownRedis started for t.
func lastContainer(t *testing.T) *redisdocker.Container {
	c, ok := owned.Load(t.Name())
	require.True(t, ok)
	return c.(*redisdocker.Container)
}

// newPool returns a radix pool whose connections are all open.
func newPool(t *testing.T, addr string, size int) radix.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := testkit.Pool(ctx, addr, size, radix.Dialer{})
	require.NoError(t, err)
	return c
}

func queueName(t *testing.T) string { return testkit.QueueName(t) }

// leakCheck verifies, when the test ends, that no goroutine it started is
// left, apart from those radix's own runner starts for a pool's connections;
// each test closes its pools before this runs.
func leakCheck(t *testing.T) { testkit.NoLeaks(t, testkit.RadixRunner) }
