package store

// Bounds the root's public API states too (its constants of these names
// must stay equal: a root test checks).
const (
	// MaxBatch is the most messages one call moves.
	MaxBatch = 10000

	// MaxShards is the most shards a queue can have.
	MaxShards = 1024
)
