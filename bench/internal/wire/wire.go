// Package wire holds what the benchmark and its asynq peer (bench/asynqpeer,
// a program of its own) exchange as JSON: the parameters of a run and the
// figures measured for one system. One definition, so that a field cannot
// drift between the two programs.
package wire

// Params are the benchmark's parameters; the peer reads the ones it uses.
type Params struct {
	Profile        string  `json:"profile,omitempty"` // quick, standard or full
	Quick          bool    `json:"quick"`             // short warm-ups and few scale points
	Messages       int     `json:"messages"`
	Producers      int     `json:"producers"`
	Workers        int     `json:"workers"`
	BatchWorkers   int     `json:"batch_workers"`
	Batch          int     `json:"batch"`
	PhaseLimit     float64 `json:"phase_limit_s"`
	PickupSamples  int     `json:"pickup_samples"`
	DelayedSamples int     `json:"delayed_samples"`
	MemoryMessages int     `json:"memory_messages"`
	IdleSeconds    float64 `json:"idle_seconds"`
	InvMessages    int     `json:"inversion_messages"`
	DrainMessages  int     `json:"drain_messages,omitempty"`
	// Rounds is how many interleaved rounds the systems run in (every
	// system once per round); 0 in results saved before rounds, meaning 1.
	// The peer runs once whatever it says.
	Rounds int `json:"rounds,omitempty"`
}

// Throughput is one throughput phase: how many messages per second, and
// what Redis spent on them.
type Throughput struct {
	Rate       float64 `json:"rate_per_s"`
	Handled    int64   `json:"handled"`
	Target     int     `json:"target"`
	Seconds    float64 `json:"seconds"`
	Duplicates int64   `json:"duplicates"`
	CmdsPerMsg float64 `json:"commands_per_message"`
	CPUPerMsg  float64 `json:"cpu_us_per_message"`
	// TripsPerMsg is the round trips (client calls: a pipeline is one) the
	// bench's client made per message, producers and consumers together.
	TripsPerMsg float64 `json:"round_trips_per_message,omitempty"`
	// ClientCPUPerMsg is the bench process's own CPU (user + system, every
	// goroutine: producers, consumers and the bench's counting) per message,
	// in microseconds: what the client side costs, beside Redis's CPUPerMsg.
	ClientCPUPerMsg float64 `json:"client_cpu_us_per_message,omitempty"`
	TimedOut        bool    `json:"timed_out"`
}

// Latency summarizes samples, in milliseconds.
type Latency struct {
	P50, P99, Max float64 // ms
	Samples       int
	Missing       int // enqueued but never handled in time
	Early         int `json:",omitempty"` // delayed messages handed out before their due time
}

// System is every figure measured for one system (a queue, a baseline, a peer).
type System struct {
	Name       string      `json:"name"`
	Reliable   bool        `json:"reliable"`
	Priorities bool        `json:"priorities"`
	Enqueue    *Throughput `json:"enqueue_only,omitempty"`
	Take       *Throughput `json:"take_only,omitempty"`
	E2E        *Throughput `json:"end_to_end,omitempty"`
	E2EBatch   *Throughput `json:"end_to_end_batched,omitempty"`
	Drain      *Throughput `json:"drain,omitempty"`
	Pickup     *Latency    `json:"idle_pickup_ms,omitempty"`
	PickupRaw  []float64   `json:"idle_pickup_samples_ms,omitempty"`
	Late       *Latency    `json:"delayed_lateness_ms,omitempty"`
	MemPerMsg  *float64    `json:"memory_bytes_per_message,omitempty"`
	IdleRate   *float64    `json:"idle_commands_per_s_per_consumer,omitempty"`
	Inversions *int        `json:"priority_inversions,omitempty"`
	InvOf      int         `json:"inversions_of,omitempty"`
	Errors     []string    `json:"errors,omitempty"`
}
