package testkit

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// SeedEnv names the variable that replays a randomized test: run the test
// again with PRIOQ_SEED set to the seed its log printed.
const SeedEnv = "PRIOQ_SEED"

// Seed returns the seed of a randomized test, from SeedEnv when it is set,
// else from the clock, and logs it with how to replay it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	if v := os.Getenv(SeedEnv); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q is not a seed: %v", SeedEnv, v, err)
		}
		t.Logf("seed %d (from %s)", seed, SeedEnv)
		return seed
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (replay: %s=%d go test -run '^%s$')", seed, SeedEnv, seed, t.Name())
	return seed
}
