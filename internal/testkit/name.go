package testkit

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
)

// QueueName is a queue name unique per test and run, made from the test's
// name (its last 80 bytes, with the characters a queue name or a hash tag
// cannot hold replaced) and a random suffix.
func QueueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	if len(n) > 80 {
		n = n[len(n)-80:]
	}
	return n + "." + hex.EncodeToString(b[:])
}
