package prioq

import (
	"context"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/store"
)

// Client is what prioq needs from a Redis client: radix's Pool and Conn
// (radix.Client) and its Cluster and Sentinel clients (radix.MultiClient) all
// satisfy it. Blocking calls take a connection of their own for their duration:
// see Consumer for how to size a pool.
type Client interface {
	Do(context.Context, radix.Action) error
}

var (
	_ Client = radix.Client(nil)
	_ Client = radix.MultiClient(nil)
	_ Client = store.Client(nil) // the same method: one converts to the other
)
