package prioq

import (
	"context"
	"fmt"

	"github.com/mediocregopher/radix/v4"
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
)

func (q *Queue) kind() string {
	if q.cfg.Layout.kind == kindRange {
		return argKindRange
	}
	return argKindLevels
}

func (q *Queue) isRange() bool { return q.cfg.Layout.kind == kindRange }

func (q *Queue) armFlag() string {
	if q.cfg.Mode == AtLeastOnce {
		return argYes
	}
	return argNo
}

// decodeLaneEntry decodes what a lane holds: the envelope itself in a level
// list, seq‖envelope in a segment.
func (q *Queue) decodeLaneEntry(b []byte) (envelope, error) {
	if q.isRange() {
		if len(b) < seqLen {
			return envelope{}, fmt.Errorf("%w: segment member of %d bytes", ErrCorrupt, len(b))
		}
		b = b[seqLen:]
	}
	return decodeEnvelope(b)
}
