package store

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// ScanQueues returns the names of the queues match accepts, sorted, found by
// SCAN of their meta keys (MetaKeyPattern) on every primary of c (never
// KEYS). Its calls go straight to radix, bounded by a minute at most. It
// needs a radix client (a Pool, a Conn, a Cluster, a Sentinel:
// ErrInvalidOption otherwise), whose primaries SCAN runs on.
func ScanQueues(ctx context.Context, c Client, match func(name string) bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute) // SCAN calls go straight to radix
	defer cancel()
	var nodes []radix.Client
	switch c := c.(type) {
	case radix.MultiClient:
		sets, err := c.Clients()
		if err != nil {
			return nil, err
		}
		for _, rs := range sets {
			nodes = append(nodes, rs.Primary)
		}
	case radix.Client:
		nodes = append(nodes, c)
	default:
		return nil, fmt.Errorf("%w: listing queues needs a radix client", ErrInvalidOption)
	}
	var names []string
	for _, node := range nodes {
		sc := (radix.ScannerConfig{Command: "SCAN", Pattern: MetaKeyPattern, Count: 10000}).New(node)
		var key string
		for sc.Next(ctx, &key) {
			if name, ok := QueueOfMetaKey(key); ok && match(name) {
				names = append(names, name)
			}
		}
		if err := sc.Close(); err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// NameGlob compiles pattern, path.Match syntax (* ? [a-z] \x) in which "*"
// and "?" match "/" too: queue names are not paths, and "team/alpha" must
// match "*" and "team/*". "" means "*". A malformed pattern is
// ErrInvalidOption.
func NameGlob(pattern string) (func(name string) bool, error) {
	if pattern == "" {
		pattern = "*"
	}
	// A name never holds a NUL byte (validateName), so it can stand in for
	// "/", which path.Match would not let a wildcard cross.
	p := strings.ReplaceAll(pattern, "/", "\x00")
	if _, err := path.Match(p, ""); err != nil {
		return nil, fmt.Errorf("%w: pattern %q: %v", ErrInvalidOption, pattern, err)
	}
	return func(name string) bool {
		ok, _ := path.Match(p, strings.ReplaceAll(name, "/", "\x00"))
		return ok
	}, nil
}
