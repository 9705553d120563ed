// Package prioqprom exposes prioq queues to Prometheus: a
// prometheus.Collector that reads each queue's Stats when it is scraped (one
// round trip per queue, all queues at once, bounded by a timeout), so the
// numbers are never older than the scrape.
//
// It is a module of its own, so that prioq itself depends on radix only.
//
//	reg.MustRegister(prioqprom.NewCollector(prioqprom.Config{Queues: []*prioq.Queue{q}}))
//
// Metrics, each labelled with the queue's name:
//
//	prioq_ready_messages{queue,lane}    ready messages per lane (0 = lowest priority)
//	prioq_delayed_messages{queue}       messages waiting for their due time
//	prioq_inflight_messages{queue}      messages leased to consumers (AtLeastOnce)
//	prioq_dead_messages{queue}          the dead-letter list's length
//	prioq_oldest_ready_age_seconds{queue} age of the oldest ready message, groups included
//	prioq_paused{queue}                 1 while consumers are paused
//	prioq_up{queue}                     1 when Stats answered within the timeout
//	prioq_enqueued_messages_total{queue} messages stored since the queue began (counter)
//	prioq_acked_messages_total{queue}   acks since the queue began (counter)
//	prioq_retried_messages_total{queue} failed deliveries scheduled again (counter)
//	prioq_dead_lettered_messages_total{queue} messages moved to the dead letters (counter)
//	prioq_expired_leases_total{queue}   leases that ended unacked (counter)
//	prioq_cancelled_messages_total{queue} messages in flight stopped by Queue.Cancel (counter)
//	prioq_parked_groups{queue}          groups with messages that wait at a limit
//	prioq_consumers{queue}              live consumers that serve it (the worker registry,
//	                                    prioq.Queue.Workers); absent when it could not be read
//
// With Config.Groups N > 0, per group of the N most loaded of each queue
// (prioq.Queue.Groups: ready + in flight; opt-in, for a group label may
// have as many values as tenants):
//
//	prioq_group_ready_messages{queue,group}    its messages waiting in its lists
//	prioq_group_inflight_messages{queue,group} its messages leased
//	prioq_group_parked{queue,group}            1 at its concurrency limit, 2 at its rate limit
//
// (A group's own oldest age is not exported: prioq keeps no per-group head
// time; the queue's prioq_oldest_ready_age_seconds counts the groups.)
//
// Alert on prioq_consumers == 0 while the ready messages are above zero: a
// queue nobody works on.
//
// The gauges are a queue's state; the two counters are its totals kept in
// Redis (prioq.Stats.Enqueued, Acked), the same whichever process exports
// them. Per-process counters (retried, dead-lettered, handler durations) come
// from the OpenTelemetry instrumentation.
package prioqprom

import (
	"context"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prioq/prioq"
)

// DefaultTimeout bounds the Stats calls of one scrape when Config.Timeout is 0.
const DefaultTimeout = 5 * time.Second

// Config configures a Collector.
type Config struct {
	// Queues are the queues to report. Their names must differ.
	Queues []*prioq.Queue

	// Namespace prefixes every metric name. Defaults to "prioq".
	Namespace string

	// Timeout bounds the Stats calls of one scrape. Defaults to
	// DefaultTimeout. A queue whose Stats fails or times out reports only
	// prioq_up 0.
	Timeout time.Duration

	// Groups, when above 0, exports the figures of each queue's Groups most
	// loaded groups (prioq_group_*). Each scrape then reads every group's
	// counts of each queue (prioq.Queue.Groups: two round trips per shard,
	// O(groups)). 0: no group series.
	Groups int
}

// Collector is a prometheus.Collector of queue states.
type Collector struct {
	cfg                                        Config
	ready, delayed, inflight, dead, age, paus  *prometheus.Desc
	enqueued, acked, retried, deadLtd, expired *prometheus.Desc
	cancelled                                  *prometheus.Desc
	up, consumers, parked                      *prometheus.Desc
	gReady, gFlight, gParked                   *prometheus.Desc
}

// NewCollector returns a Collector of cfg.Queues.
func NewCollector(cfg Config) *Collector {
	if cfg.Namespace == "" {
		cfg.Namespace = "prioq"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(cfg.Namespace, "", name), help, append([]string{"queue"}, labels...), nil)
	}
	return &Collector{
		cfg:       cfg,
		ready:     d("ready_messages", "Ready messages per lane (lane 0 has the lowest priorities).", "lane"),
		delayed:   d("delayed_messages", "Messages waiting for their due time."),
		inflight:  d("inflight_messages", "Messages leased to consumers (AtLeastOnce)."),
		dead:      d("dead_messages", "Messages in the dead-letter list."),
		age:       d("oldest_ready_age_seconds", "Age of the oldest ready message (lanes' heads, and groups' lists: prioq.Stats.OldestReady); 0 when none is ready."),
		paus:      d("paused", "1 while the queue's consumers are paused."),
		enqueued:  d("enqueued_messages_total", "Messages stored by enqueues since the queue began (prioq.Stats.Enqueued; for rates)."),
		acked:     d("acked_messages_total", "Acks since the queue began (prioq.Stats.Acked, AtLeastOnce; for rates)."),
		up:        d("up", "1 when the queue's Stats answered within the scrape's timeout."),
		retried:   d("retried_messages_total", "Deliveries that failed and were scheduled again, since the queue began (prioq.Stats.Retried)."),
		deadLtd:   d("dead_lettered_messages_total", "Messages moved to the dead letters since the queue began (prioq.Stats.DeadLettered)."),
		expired:   d("expired_leases_total", "Leases that ended unacked, their messages delivered again, since the queue began (prioq.Stats.Expired)."),
		cancelled: d("cancelled_messages_total", "Messages in flight stopped by Queue.Cancel, since the queue began (prioq.Stats.Cancelled)."),
		parked:    d("parked_groups", "Groups whose messages wait at a limit (concurrency or rate): counted in ready, in no lane."),
		consumers: d("consumers", "Live consumers that serve the queue (the worker registry: prioq.Queue.Workers)."),
		gReady:    d("group_ready_messages", "A group's messages waiting in its lists (Config.Groups most loaded groups).", "group"),
		gFlight:   d("group_inflight_messages", "A group's messages leased to consumers (Config.Groups most loaded groups).", "group"),
		gParked:   d("group_parked", "1 while a group waits at its concurrency limit, 2 at its rate limit, else 0 (Config.Groups most loaded groups).", "group"),
	}
}

// Describe sends the descriptions of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ready, c.delayed, c.inflight, c.dead, c.age, c.paus, c.enqueued, c.acked, c.up, c.consumers, c.retried, c.deadLtd, c.expired, c.cancelled, c.parked} {
		ch <- d
	}
	if c.cfg.Groups > 0 {
		ch <- c.gReady
		ch <- c.gFlight
		ch <- c.gParked
	}
}

// Collect reads every queue's Stats at once and sends the metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	type result struct {
		st      prioq.Stats
		err     error
		workers int // -1: not known
		groups  []prioq.GroupStats
	}
	res := make([]result, len(c.cfg.Queues))
	var wg sync.WaitGroup
	for i, q := range c.cfg.Queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := q.Stats(ctx)
			res[i] = result{st: st, err: err, workers: -1}
			if ws, werr := q.Workers(ctx); werr == nil {
				res[i].workers = len(ws)
			}
			if c.cfg.Groups > 0 && err == nil && q.Mode() == prioq.AtLeastOnce {
				res[i].groups, _ = q.Groups(ctx, c.cfg.Groups) // on error none: see Collect's use
			}
		}()
	}
	wg.Wait()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for i, q := range c.cfg.Queues {
		name := q.Name()
		if res[i].err != nil {
			gauge(c.up, 0, name)
			continue
		}
		st := res[i].st
		gauge(c.up, 1, name)
		for lane, n := range st.Lanes {
			gauge(c.ready, float64(n), name, strconv.Itoa(lane))
		}
		gauge(c.delayed, float64(st.Delayed), name)
		gauge(c.inflight, float64(st.InFlight), name)
		gauge(c.dead, float64(st.Dead), name)
		gauge(c.age, st.OldestReady.Seconds(), name)
		paused := 0.0
		if st.Paused {
			paused = 1
		}
		gauge(c.paus, paused, name)
		gauge(c.parked, float64(st.GroupsParked), name)
		if res[i].workers >= 0 {
			gauge(c.consumers, float64(res[i].workers), name)
		}
		// A queue whose groups cannot be read (a key of the wrong type, a
		// timeout) has no group series this scrape; the rest of the scrape
		// stands. A group name that is not UTF-8 cannot be a label value:
		// that group is left out.
		for _, g := range res[i].groups {
			if !utf8.ValidString(g.Group) {
				continue
			}
			gauge(c.gReady, float64(g.Ready), name, g.Group)
			gauge(c.gFlight, float64(g.InFlight), name, g.Group)
			parked := 0.0
			switch {
			case g.RateParked:
				parked = 2
			case g.Parked:
				parked = 1
			}
			gauge(c.gParked, parked, name, g.Group)
		}
		// Totals kept in Redis: counters, so rate() works across restarts of
		// the process that exports them.
		ch <- prometheus.MustNewConstMetric(c.enqueued, prometheus.CounterValue, float64(st.Enqueued), name)
		ch <- prometheus.MustNewConstMetric(c.acked, prometheus.CounterValue, float64(st.Acked), name)
		ch <- prometheus.MustNewConstMetric(c.retried, prometheus.CounterValue, float64(st.Retried), name)
		ch <- prometheus.MustNewConstMetric(c.deadLtd, prometheus.CounterValue, float64(st.DeadLettered), name)
		ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(st.Expired), name)
		ch <- prometheus.MustNewConstMetric(c.cancelled, prometheus.CounterValue, float64(st.Cancelled), name)
	}
}
