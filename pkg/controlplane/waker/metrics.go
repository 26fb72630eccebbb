package waker

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	heldRequests = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenantry_wake_held_requests",
		Help: "Requests to sleeping control planes' API servers held now, until their control plane answers.",
	})
	holdSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tenantry_wake_hold_seconds",
		Help:    "How long a request to a sleeping control plane was held before its API server answered it: the wake as its client sees it.",
		Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300},
	})
	wakes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantry_wakes_requested_total",
		Help: "Sleeping VirtualClusters that a request to their API server asked to wake.",
	})
)

func init() {
	metrics.Registry.MustRegister(heldRequests, holdSeconds, wakes)
}
