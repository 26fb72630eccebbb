package mcprovider

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The provider's metrics, in controller-runtime's registry (served by the
// management manager's metrics endpoint). Every Provider in the process
// adds to them.
var (
	engagedClusters = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenantry_mcprovider_engaged_clusters",
		Help: "Clusters that the multicluster-runtime provider has engaged and not disengaged.",
	})

	engageFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantry_mcprovider_engage_failures_total",
		Help: "Times the multicluster-runtime provider could not engage a running cluster (an index it refused, an Engage that failed); each is retried with backoff.",
	})
)

func init() {
	metrics.Registry.MustRegister(engagedClusters, engageFailures)
}
