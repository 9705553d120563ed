package integration

import (
	"math/rand/v2"
	"testing"

	"github.com/prioq/prioq/internal/testkit"
)

// newRand is a seeded generator whose seed is logged, to replay a failure.
func newRand(t testing.TB, salt int) *rand.Rand {
	return rand.New(rand.NewPCG(testkit.Seed(t), uint64(salt)))
}
