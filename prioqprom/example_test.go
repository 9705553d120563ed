package prioqprom_test

import (
	"context"
	"log"
	"net/http"

	"github.com/mediocregopher/radix/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/prioqprom"
)

// Serve the state of two queues on /metrics.
func ExampleNewCollector() {
	ctx := context.Background()
	client, err := radix.PoolConfig{}.New(ctx, "tcp", "127.0.0.1:6379")
	if err != nil {
		log.Fatal(err)
	}
	orders, err := prioq.Open(ctx, client, "orders", prioq.Config{})
	if err != nil {
		log.Fatal(err)
	}
	emails, err := prioq.Open(ctx, client, "emails", prioq.Config{Layout: prioq.Levels(2)})
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prioqprom.NewCollector(prioqprom.Config{Queues: []*prioq.Queue{orders, emails}}))
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Fatal(http.ListenAndServe("127.0.0.1:9100", nil))
}
