package integration

import (
	"math/rand/v2"
	"time"
)

func newRand(salt int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(salt)))
}
