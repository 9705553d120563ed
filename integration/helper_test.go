package integration

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// The test binary re-runs itself as a consumer or producer process. Each
// process writes one line per event to stdout, unbuffered, so that what a
// SIGKILLed process reported is all in the pipe:
//
//	S id   a delivery started (a handler got the message)
//	A id   its ack succeeded
//	E id   an enqueue succeeded
//
// The role "consume-groups" writes, for messages of a group, instead of S:
//
//	G id group start   a delivery started, at start (unix ns, this host)
//	F id group end     its handler ended, just before its ack
//	T id group taken   the take's time, on the Redis server's clock
//
// and A as above; every consumer role writes "R ready" once its consumers
// run. H_LIMIT, when set, is every group's concurrency limit;
// H_HANDLE_MS the longest a handler runs (2 ms by default).
const helperEnv = "PRIOQ_INTEGRATION_HELPER"

type queueSpec struct {
	name   string
	layout string // "levels" or "range"
	mode   string // "alo" or "amo"
}

func (s queueSpec) config() prioq.Config {
	cfg := prioq.Config{Layout: prioq.Levels(5)}
	if s.layout == "range" {
		cfg.Layout = prioq.Range(-1000, 1000, 8)
	}
	if s.mode == "amo" {
		cfg.Mode = prioq.AtMostOnce
	}
	return cfg
}

func (s queueSpec) priority(r *rand.Rand) int64 {
	if s.layout == "range" {
		return r.Int64N(2001) - 1000
	}
	return r.Int64N(5)
}

func runHelper(role string) int {
	spec := queueSpec{os.Getenv("H_QUEUE"), os.Getenv("H_LAYOUT"), os.Getenv("H_MODE")}
	ctx := context.Background()
	// H_ADDR is an address, or cluster: and the addresses of a cluster's
	// nodes, comma-separated; H_SHARDS, when set, the queue's shards.
	var cl prioq.Client
	var err error
	if addrs, ok := strings.CutPrefix(os.Getenv("H_ADDR"), "cluster:"); ok {
		cl, err = radix.ClusterConfig{PoolConfig: prioq.LazyPools(radix.PoolConfig{Size: 40})}.New(ctx, strings.Split(addrs, ","))
	} else {
		cl, err = radix.PoolConfig{Size: 40}.New(ctx, "tcp", os.Getenv("H_ADDR"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	cfg := spec.config()
	cfg.Shards, _ = strconv.Atoi(os.Getenv("H_SHARDS"))
	q, err := prioq.Open(ctx, cl, spec.name, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	out := os.Stdout
	// H_SEED is set, and logged, by startHelper.
	seed, _ := strconv.ParseUint(os.Getenv("H_SEED"), 10, 64)
	var mu sync.Mutex
	emit := func(kind, id string) {
		mu.Lock()
		fmt.Fprintf(out, "%s %s\n", kind, id)
		mu.Unlock()
	}
	switch role {
	case "produce":
		n, _ := strconv.Atoi(os.Getenv("H_N"))
		prefix := os.Getenv("H_PREFIX")
		r := rand.New(rand.NewPCG(seed, 3))
		for i := 0; i < n; i++ {
			id := prefix + strconv.Itoa(i)
			opts := []prioq.Option{prioq.ID(id), prioq.Priority(spec.priority(r))}
			if r.IntN(5) == 0 {
				opts = append(opts, prioq.Delay(time.Duration(r.IntN(300))*time.Millisecond))
			}
			if _, err := q.Enqueue(ctx, []byte("payload of "+id), opts...); err == nil {
				emit("E", id)
			}
		}
		return 0
	case "consume-groups":
		handleUs := 2000 // a handler runs up to this many µs (H_HANDLE_MS)
		if ms, _ := strconv.Atoi(os.Getenv("H_HANDLE_MS")); ms > 0 {
			handleUs = 1000 * ms
		}
		if l, _ := strconv.Atoi(os.Getenv("H_LIMIT")); l > 0 {
			if err := q.SetGroupLimit(ctx, "", prioq.GroupLimit{Concurrency: l}); err != nil {
				fmt.Fprintln(os.Stderr, "helper:", err)
				return 1
			}
		}
		return consumeLoops(ctx, q, seed, func(m *prioq.Message, r *rand.Rand) {
			emit("G", fmt.Sprintf("%s %s %d", m.ID, m.Group, time.Now().UnixNano()))
			emit("T", fmt.Sprintf("%s %s %d", m.ID, m.Group, m.TakenAt().UnixNano()))
			time.Sleep(time.Duration(r.IntN(handleUs)) * time.Microsecond)
			emit("F", fmt.Sprintf("%s %s %d", m.ID, m.Group, time.Now().UnixNano()))
			if err := m.Ack(ctx); err == nil {
				emit("A", m.ID)
			}
		})
	case "run-long": // life_test.go: Run with renewal, handlers 10x the lease
		cons, err := q.NewConsumer(prioq.ConsumerConfig{Concurrency: 8, Lease: 300 * time.Millisecond,
			SweepInterval: 50 * time.Millisecond})
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		fmt.Fprintln(os.Stdout, "R ready")
		_ = cons.Run(ctx, func(ctx context.Context, m *prioq.Message) error {
			emit("S", m.ID)
			select {
			case <-ctx.Done():
				emit("X", m.ID) // the handler's context ended: lease lost
				return ctx.Err()
			case <-time.After(3 * time.Second):
			}
			if err := m.Ack(ctx); err == nil {
				emit("A", m.ID)
			}
			return nil
		})
		return 0
	case "consume-ticks": // schedules_test.go: S id, receipt time (unix ms), attempts
		return consumeLoops(ctx, q, seed, func(m *prioq.Message, _ *rand.Rand) {
			emit("S", fmt.Sprintf("%s %d %d", m.ID, time.Now().UnixMilli(), m.Attempts))
			if err := m.Ack(ctx); err == nil {
				emit("A", m.ID)
			}
		})
	case "consume":
		return consumeLoops(ctx, q, seed, func(m *prioq.Message, r *rand.Rand) {
			emit("S", m.ID)
			time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
			if spec.mode == "alo" {
				if err := m.Ack(ctx); err == nil {
					emit("A", m.ID)
				}
			}
		})
	}
	return 2
}

// consumeLoops runs H_WORKERS consumers of q (the first one promotes), each
// receiving one message at a time and handing it to handle with a random
// source of its own, until the process is killed.
func consumeLoops(ctx context.Context, q *prioq.Queue, seed uint64, handle func(*prioq.Message, *rand.Rand)) int {
	workers, _ := strconv.Atoi(os.Getenv("H_WORKERS"))
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		cons, err := q.NewConsumer(prioq.ConsumerConfig{Lease: time.Second, SweepInterval: 200 * time.Millisecond, NoPromoter: w > 0})
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		wg.Add(1)
		r := rand.New(rand.NewPCG(seed, uint64(100+w)))
		go func() {
			defer wg.Done()
			for {
				m, err := cons.Receive(ctx)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				handle(m, r)
			}
		}()
	}
	// Every consumer runs: say so (R), for tests that must not start the
	// work before this process can take part in it.
	fmt.Fprintln(os.Stdout, "R ready")
	wg.Wait() // runs until killed
	return 0
}

// ready waits until h's consumers run (its R line): a process started with
// exec takes a while (seconds, under the race detector and a loaded machine),
// during which in-process consumers could drain everything alone.
func (h *helperProc) ready(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return len(h.get("R")) > 0 }, time.Minute, 10*time.Millisecond,
		"the helper's consumers never started")
}

// helperProc is a running helper process and what it has reported so far.
type helperProc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	events map[string][]string // kind -> ids, in order
}

func startHelper(t *testing.T, role, addr string, spec queueSpec, env ...string) *helperProc {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("helper %s: seed %d", role, seed)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+role, "H_ADDR="+addr, "H_QUEUE="+spec.name,
		"H_LAYOUT="+spec.layout, "H_MODE="+spec.mode, "H_SEED="+strconv.FormatUint(seed, 10))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	h := &helperProc{cmd: cmd, done: make(chan struct{}), events: map[string][]string{}}
	go func() {
		defer close(h.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			kind, id, ok := strings.Cut(sc.Text(), " ")
			if ok {
				h.mu.Lock()
				h.events[kind] = append(h.events[kind], id)
				h.mu.Unlock()
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() { h.kill() })
	return h
}

func (h *helperProc) kill() {
	_ = h.cmd.Process.Kill()
	<-h.done
}

func (h *helperProc) wait(t *testing.T, d time.Duration) {
	select {
	case <-h.done:
	case <-time.After(d):
		t.Fatalf("helper %v did not finish in %v", h.cmd.Args, d)
	}
}

func (h *helperProc) get(kind string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.events[kind]...)
}
