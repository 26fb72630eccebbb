package clusterregistry

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The registry's metrics, in controller-runtime's registry (served by the
// management manager's metrics endpoint). They are process-wide: every
// registry in the process adds to them.
var (
	clustersByState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantry_registry_clusters",
		Help: "Clusters in the registry, by state.",
	}, []string{"state"})

	clusterState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantry_registry_cluster_state",
		Help: "1 for the state each cluster in the registry is in.",
	}, []string{"cluster", "state"})

	clusterFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_registry_cluster_failures_total",
		Help: "Times a running cluster failed: its manager exited or its API server stopped answering.",
	}, []string{"cluster"})

	cacheObjects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantry_registry_cache_objects",
		Help: "Objects a running cluster makes the manager hold, against its cache limits: its cache's, every watched type together, and its copies in a cache every cluster shares (the syncer's host copies).",
	}, []string{"cluster"})

	cacheBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantry_registry_cache_bytes",
		Help: "Bytes of the objects a running cluster makes the manager hold, against its cache limits (its cache's and its host copies'), as encoded, without managed fields.",
	}, []string{"cluster"})

	cacheLimitBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantry_registry_cache_limit_bytes",
		Help: "The byte limit of a running cluster's cache; 0 for none.",
	}, []string{"cluster"})

	cacheLimitExceeded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_registry_cache_limit_exceeded_total",
		Help: "Times a cluster's objects went past its cache limits, at a spawn or while it ran.",
	}, []string{"cluster"})

	cacheBudgetSpent = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantry_registry_cache_budget_spent_total",
		Help: "Times every cluster's cache together went past the registry's cache budget, and the largest cluster was stopped.",
	})

	pagesCut = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantry_registry_list_pages_cut_total",
		Help: "Pages of clusters' lists whose answers went past the bytes a page may take, asked for again with fewer objects.",
	})

	spawnDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenantry_registry_spawn_duration_seconds",
		Help:    "Time from Spawn to a running cluster with synced caches, or to the error.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 13), // 10ms to ~41s
	}, []string{"result"})

	stopDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenantry_registry_stop_duration_seconds",
		Help:    "Time from Stop to a fully torn-down cluster, or to the error.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 13),
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(clustersByState, clusterState, clusterFailures, spawnDuration, stopDuration,
		cacheObjects, cacheBytes, cacheLimitBytes, cacheLimitExceeded, cacheBudgetSpent, pagesCut)
}

// recordTransition moves a cluster's state gauges from one state to the
// next; an empty state means "not in the registry".
func recordTransition(cluster string, from, to State) {
	if from != "" {
		clustersByState.WithLabelValues(string(from)).Dec()
		clusterState.DeleteLabelValues(cluster, string(from))
	}
	if to != "" {
		clustersByState.WithLabelValues(string(to)).Inc()
		clusterState.WithLabelValues(cluster, string(to)).Set(1)
	}
}
