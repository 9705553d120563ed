package prioq

import "github.com/prioq/prioq/internal/store"

// The parts of a queue's meta key (internal/store's keys.go describes every
// key).
const (
	keyPrefix = store.KeyPrefix
	keyTagEnd = store.KeyTagEnd
	metaName  = store.MetaName
)

// MetaKeyPattern matches the meta key of every queue (written by Open): tools
// find the queues of a Redis by SCAN with this MATCH pattern (never KEYS) and
// QueueOfMetaKey.
const MetaKeyPattern = keyPrefix + "*" + keyTagEnd + metaName

// QueueOfMetaKey returns the name of the queue whose meta key is key, and
// false when key is not a queue's meta key.
func QueueOfMetaKey(key string) (string, bool) { return store.QueueOfMetaKey(key) }
