package store

import (
	"context"
	"fmt"
	"path"
	"regexp"
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

// NameGlob compiles pattern, path.Match syntax (* ? [a-z] [^a-z] \x) in which
// "*" and "?" match "/" too: queue names are not paths, and "team/alpha"
// must match "*" and "team/*". "" means "*". A malformed pattern is
// ErrInvalidOption. The pattern becomes a regular expression: "/" is an
// ordinary character everywhere, in a class's ranges too.
func NameGlob(pattern string) (func(name string) bool, error) {
	if pattern == "" {
		pattern = "*"
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("%w: pattern %q: %v", ErrInvalidOption, pattern, err)
	}
	var b strings.Builder
	b.WriteString(`(?s)\A`)
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '\\':
			i++ // path.Match checked that something follows
			b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
		case '[':
			b.WriteByte('[')
			i++
			if i < len(pattern) && pattern[i] == '^' {
				b.WriteByte('^')
				i++
			}
			for ; pattern[i] != ']'; i++ { // path.Match checked the class is closed
				switch pattern[i] {
				case '\\':
					i++
					b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
				case '-':
					b.WriteByte('-')
				default:
					b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
				}
			}
			b.WriteByte(']')
		default:
			b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
		}
	}
	b.WriteString(`\z`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("%w: pattern %q: %v", ErrInvalidOption, pattern, err)
	}
	return re.MatchString, nil
}
