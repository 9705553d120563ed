// Command asynqpeer measures hibiken/asynq on the Redis the prioq benchmark
// uses, the way bench/ measures prioq, and prints the results as JSON on
// stdout. It lives in the bench module, so asynq and go-redis stay out of
// prioq's go.mod. asynq runs with its default settings except for the queue
// weights, which priorities need: critical 6, default 3, low 1 (the example
// from asynq's own README).
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prioq/prioq/bench/internal/wire"
	"github.com/redis/go-redis/v9"
)

var queues = []string{"low", "default", "critical"} // level 0, 1, 2

var (
	addr string
	rdb  *redis.Client
)

func main() {
	flag.StringVar(&addr, "addr", "127.0.0.1:6379", "Redis address")
	ps := flag.String("params", "{}", "benchmark parameters (JSON)")
	flag.Parse()
	var p params
	if err := json.Unmarshal([]byte(*ps), &p); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rdb = redis.NewClient(&redis.Options{Addr: addr})
	var r result
	note := func(what string, err error) {
		if err != nil {
			r.Errors = append(r.Errors, what+": "+err.Error())
		}
	}
	limit := time.Duration(p.PhaseLimit * float64(time.Second))
	t, err := enqueueOnly(p, limit)
	note("enqueue", err)
	r.Enqueue = t
	t, err = endToEnd(p, limit)
	note("end to end", err)
	r.E2E = t
	r.Pickup, err = pickup(p, limit)
	note("pickup", err)
	r.Late, err = lateness(p, limit)
	note("lateness", err)
	mem, err := memory(p)
	note("memory", err)
	r.MemPerMsg = &mem
	idle, err := idleRate(p)
	note("idle", err)
	r.IdleRate = &idle
	inv, of, err := inversions(p, limit)
	note("inversions", err)
	r.Inversions, r.InvOf = &inv, of
	clean()
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func opt() asynq.RedisClientOpt { return asynq.RedisClientOpt{Addr: addr} }

func clean() {
	ctx := context.Background()
	keys, _ := rdb.Keys(ctx, "asynq:*").Result()
	for len(keys) > 0 {
		n := min(500, len(keys))
		rdb.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
}

type (
	params     = wire.Params
	throughput = wire.Throughput
	latency    = wire.Latency
	result     = wire.System
)

type stats struct {
	commands int64
	cpu      float64
	memory   int64
}

func readStats() stats {
	info, _ := rdb.Info(context.Background(), "all").Result()
	var s stats
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "total_commands_processed":
			s.commands, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		case "used_memory":
			s.memory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return s
}

var seq atomic.Uint64

func payload(level int, at time.Time) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint64(b, uint64(at.UnixNano()))
	binary.BigEndian.PutUint64(b[8:], seq.Add(1))
	b[16] = byte(level)
	return b
}

func produce(c *asynq.Client, n, producers int, deadline time.Time) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Value
	for i := 0; i < producers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && time.Now().Before(deadline) {
				l := rand.IntN(3)
				if _, err := c.Enqueue(asynq.NewTask("bench", payload(l, time.Now())), asynq.Queue(queues[l])); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return err
	}
	return nil
}

func server(concurrency int, h func(p []byte)) *asynq.Server {
	srv := asynq.NewServer(opt(), asynq.Config{Concurrency: concurrency,
		Queues: map[string]int{"critical": 6, "default": 3, "low": 1}, LogLevel: asynq.FatalLevel})
	_ = srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { h(t.Payload()); return nil }))
	return srv
}

func enqueueOnly(p params, limit time.Duration) (*throughput, error) {
	clean()
	c := asynq.NewClient(opt())
	defer c.Close()
	start := time.Now()
	err := produce(c, p.Messages, p.Producers, start.Add(limit))
	el := time.Since(start)
	n, _ := countPending()
	return &throughput{Rate: float64(n) / el.Seconds(), Handled: n, Target: p.Messages, Seconds: el.Seconds(), TimedOut: n < int64(p.Messages)}, err
}

func countPending() (int64, error) {
	var n int64
	for _, q := range queues {
		l, err := rdb.LLen(context.Background(), "asynq:{"+q+"}:pending").Result()
		if err != nil {
			return n, err
		}
		n += l
	}
	return n, nil
}

func endToEnd(p params, limit time.Duration) (*throughput, error) {
	clean()
	var handled, dups atomic.Int64
	var mu sync.Mutex
	seen := map[uint64]bool{}
	done := make(chan struct{})
	var once sync.Once
	srv := server(p.Workers, func(b []byte) {
		s := binary.BigEndian.Uint64(b[8:])
		mu.Lock()
		dup := seen[s]
		seen[s] = true
		mu.Unlock()
		if dup {
			dups.Add(1)
			return
		}
		if handled.Add(1) == int64(p.Messages) {
			once.Do(func() { close(done) })
		}
	})
	defer srv.Shutdown()
	time.Sleep(300 * time.Millisecond)
	c := asynq.NewClient(opt())
	defer c.Close()
	before := readStats()
	start := time.Now()
	go func() { _ = produce(c, p.Messages, p.Producers, start.Add(limit)) }()
	timedOut := false
	select {
	case <-done:
	case <-time.After(limit):
		timedOut = true
	}
	el := time.Since(start)
	after := readStats()
	n := handled.Load()
	t := &throughput{Handled: n, Target: p.Messages, Seconds: el.Seconds(), Duplicates: dups.Load(), TimedOut: timedOut}
	if n > 0 {
		t.Rate = float64(n) / el.Seconds()
		t.CmdsPerMsg = float64(after.commands-before.commands-1) / float64(n)
		t.CPUPerMsg = (after.cpu - before.cpu) * 1e6 / float64(n)
	}
	return t, nil
}

func summarize(ds []time.Duration, missing, early int) *latency {
	if len(ds) == 0 {
		return &latency{Missing: missing, Early: early}
	}
	slices.Sort(ds)
	q := func(f float64) float64 { return float64(ds[int(f*float64(len(ds)-1))]) / 1e6 }
	return &latency{P50: q(0.5), P99: q(0.99), Max: float64(ds[len(ds)-1]) / 1e6, Samples: len(ds), Missing: missing, Early: early}
}

func pickup(p params, limit time.Duration) (*latency, error) {
	clean()
	got := make(chan time.Duration, 1)
	srv := server(1, func(b []byte) {
		got <- time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(b))))
	})
	defer srv.Shutdown()
	c := asynq.NewClient(opt())
	defer c.Close()
	time.Sleep(300 * time.Millisecond)
	var ds []time.Duration
	missing := 0
	end := time.Now().Add(limit)
	for i := 0; i < p.PickupSamples && (i < 3 || time.Now().Before(end)); i++ {
		if _, err := c.Enqueue(asynq.NewTask("bench", payload(2, time.Now())), asynq.Queue("critical")); err != nil {
			return nil, err
		}
		select {
		case d := <-got:
			ds = append(ds, d)
		case <-time.After(5 * time.Second):
			missing++
		}
		time.Sleep(3 * time.Millisecond)
	}
	return summarize(ds, missing, 0), nil
}

func lateness(p params, limit time.Duration) (*latency, error) {
	clean()
	var mu sync.Mutex
	var ds []time.Duration
	early := 0
	srv := server(4, func(b []byte) {
		d := time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(b))))
		mu.Lock()
		if d < 0 {
			early++
		}
		ds = append(ds, d)
		mu.Unlock()
	})
	defer srv.Shutdown()
	c := asynq.NewClient(opt())
	defer c.Close()
	spread := 2 * time.Second
	start := time.Now().Add(100 * time.Millisecond)
	for i := 0; i < p.DelayedSamples; i++ {
		due := start.Add(time.Duration(rand.Int64N(int64(spread))))
		if _, err := c.Enqueue(asynq.NewTask("bench", payload(1, due)), asynq.ProcessAt(due)); err != nil {
			return nil, err
		}
	}
	// asynq checks scheduled tasks every 5 s.
	waitUntil(spread+limit+6*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(ds) >= p.DelayedSamples })
	mu.Lock()
	defer mu.Unlock()
	return summarize(ds, p.DelayedSamples-len(ds), early), nil
}

func memory(p params) (float64, error) {
	clean()
	c := asynq.NewClient(opt())
	defer c.Close()
	before := readStats()
	if err := produce(c, p.MemoryMessages, 4, time.Now().Add(time.Hour)); err != nil {
		return 0, err
	}
	after := readStats()
	return float64(after.memory-before.memory)/float64(p.MemoryMessages) - 64, nil
}

func idleRate(p params) (float64, error) {
	clean()
	srv := server(4, func([]byte) {})
	defer srv.Shutdown()
	time.Sleep(2 * time.Second)
	before := readStats()
	time.Sleep(time.Duration(p.IdleSeconds * float64(time.Second)))
	after := readStats()
	return float64(after.commands-before.commands-1) / p.IdleSeconds, nil
}

func inversions(p params, limit time.Duration) (int, int, error) {
	clean()
	c := asynq.NewClient(opt())
	defer c.Close()
	if err := produce(c, p.InvMessages, 1, time.Now().Add(time.Hour)); err != nil {
		return 0, 0, err
	}
	var mu sync.Mutex
	var order []int
	srv := server(1, func(b []byte) { mu.Lock(); order = append(order, int(b[16])); mu.Unlock() })
	waitUntil(limit+5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) >= p.InvMessages })
	srv.Shutdown()
	mu.Lock()
	defer mu.Unlock()
	inv, best := 0, -1
	for i := len(order) - 1; i >= 0; i-- {
		if best > order[i] {
			inv++
		}
		best = max(best, order[i])
	}
	return inv, len(order), nil
}

// waitUntil polls done every 20 ms until it holds or d has passed.
func waitUntil(d time.Duration, done func() bool) {
	for deadline := time.Now().Add(d); !done() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}
