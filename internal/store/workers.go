package store

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// The worker registry: every consumer (a Consumer, a MultiConsumer) writes a
// record of itself, with a time to live, every heartbeat, and deletes it when
// it closes; one that dies leaves a record that expires. Its keys share one
// hash tag of their own, so the registry is legal on a cluster (it lives on
// the node of that slot), and they start with "prioq:workers:", which no
// queue's key does (those start with "prioq:{" or "prioq/"), so a user's ACL
// pattern ~prioq:* covers them:
//
//	prioq:workers:{w}:index     ZSET    worker id -> its record's expiry (server ms)
//	prioq:workers:{w}:rec:<id>  STRING  the record (JSON: WorkerRecord), PX its time to live
//	prioq:workers:{w}:q:<id>    STRING  the names of the queues it serves (JSON), written
//	                                    when they change, its life extended each heartbeat
//
// Readers trust the records, not the index: an index entry whose record
// expired is skipped (and dropped by the next heartbeat of any worker).
const workerPrefix = "prioq:workers:{w}:"

// WorkerIndexKey is the registry's index (for docs, tests and the CLI).
const WorkerIndexKey = workerPrefix + "index"

func workerKeys(id string) []string {
	return []string{WorkerIndexKey, workerPrefix + "rec:" + id, workerPrefix + "q:" + id}
}

// WorkerRecord is what a worker says of itself. The queue names travel
// apart from it (they change rarely and may be many).
type WorkerRecord struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"` // "consumer" or "multi"
	Host        string `json:"host"`
	PID         int    `json:"pid"`
	Process     string `json:"process"`
	Holder      string `json:"holder,omitempty"` // HolderID: what its process's lease tokens name
	Pattern     string `json:"pattern,omitempty"`
	Concurrency int    `json:"concurrency"`
	InFlight    int    `json:"in_flight"`
	Delivered   int64  `json:"delivered"`
	StartedMs   int64  `json:"started_ms"`
	TTLMs       int64  `json:"ttl_ms"`
	// Filled by the reader:
	Queues    []string `json:"-"`
	ExpiresMs int64    `json:"-"` // server clock
}

//go:embed lua/worker.lua
var workerSrc string
var workerScript = newScript(workerSrc)

// Heartbeat writes rec for ttl (rec.TTLMs is set from it) and, when queues is
// not nil, the names of the queues it serves. It returns needQueues when the
// names were not sent and their key was gone (a restart without persistence
// lost it): the caller sends them again. It returns by timeout when ctx has
// no deadline.
func Heartbeat(ctx context.Context, c Client, timeout, ttl time.Duration, rec WorkerRecord, queues []string) (needQueues bool, err error) {
	rec.TTLMs = ttl.Milliseconds()
	body, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	names := ""
	if queues != nil {
		b, err := json.Marshal(queues)
		if err != nil {
			return false, err
		}
		names = string(b)
	}
	var reply string
	err = registryCall(ctx, c, timeout, func() radix.Action {
		return workerScript.Cmd(&reply, workerKeys(rec.ID), rec.ID, fmtInt(rec.TTLMs), string(body), names)
	})
	if err != nil {
		return false, fmt.Errorf("prioq: worker registry: heartbeat: %w", err)
	}
	return reply == "queues", nil
}

// Goodbye deletes worker id's record: it stopped.
func Goodbye(ctx context.Context, c Client, timeout time.Duration, id string) error {
	var reply string
	err := registryCall(ctx, c, timeout, func() radix.Action { return workerScript.Cmd(&reply, workerKeys(id), id, "0", "", "") })
	if err != nil {
		return fmt.Errorf("prioq: worker registry: goodbye: %w", err)
	}
	return nil
}

// Workers reads the registry: the live workers (their records have not
// expired), sorted by host, process id, then id. A record that does not parse
// is skipped and counted in broken.
func Workers(ctx context.Context, c Client, timeout time.Duration) (ws []WorkerRecord, broken int, err error) {
	var index []string
	if err := registryCall(ctx, c, timeout, func() radix.Action {
		return radix.Cmd(&index, "ZRANGE", WorkerIndexKey, "0", "-1", "WITHSCORES")
	}); err != nil {
		return nil, 0, fmt.Errorf("prioq: worker registry: reading %s: %w", WorkerIndexKey, err)
	}
	if len(index) == 0 {
		return nil, 0, nil
	}
	keys := make([]string, 0, len(index))
	for i := 0; i+1 < len(index); i += 2 {
		k := workerKeys(index[i])
		keys = append(keys, k[1], k[2])
	}
	vals := make([]*string, len(keys))
	// One MGET per 512 workers: every key is in the registry's slot.
	for at := 0; at < len(keys); at += 1024 {
		end := min(at+1024, len(keys))
		var part []*string
		if err := registryCall(ctx, c, timeout, func() radix.Action { return radix.Cmd(&part, "MGET", keys[at:end]...) }); err != nil {
			return nil, 0, fmt.Errorf("prioq: worker registry: reading records: %w", err)
		}
		copy(vals[at:end], part)
	}
	for i := 0; i+1 < len(index); i += 2 {
		recv, namesv := vals[i], vals[i+1]
		if recv == nil {
			continue // expired: the worker stopped without a goodbye
		}
		var r WorkerRecord
		if json.Unmarshal([]byte(*recv), &r) != nil || r.ID != index[i] {
			broken++
			continue
		}
		if namesv != nil && json.Unmarshal([]byte(*namesv), &r.Queues) != nil {
			broken++
			continue
		}
		fmt.Sscan(index[i+1], &r.ExpiresMs)
		ws = append(ws, r)
	}
	slices.SortFunc(ws, func(a, b WorkerRecord) int {
		switch {
		case a.Host != b.Host:
			return cmp.Compare(a.Host, b.Host)
		case a.PID != b.PID:
			return cmp.Compare(a.PID, b.PID)
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return ws, broken, nil
}

// registryCall runs the action build makes under timeout (when ctx has no
// deadline), again while the registry's slot is being moved between
// cluster nodes (TRYAGAIN for a call whose keys are split), as every queue
// call does (DESIGN.md §5).
func registryCall(ctx context.Context, c Client, timeout time.Duration, build func() radix.Action) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return retryRedirects(ctx, func(ctx context.Context) error { return doBounded(ctx, c, timeout, build()) })
}
