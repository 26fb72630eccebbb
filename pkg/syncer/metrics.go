package syncer

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The syncers' metrics, in controller-runtime's registry.
var (
	driftFound = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_syncer_drift_found_total",
		Help: "Objects the patroller found out of sync between a tenant and the host.",
	}, []string{"cluster", "resource"})

	driftRepaired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_syncer_drift_repaired_total",
		Help: "Objects found out of sync by the patroller that a sync then repaired.",
	}, []string{"cluster", "resource"})

	writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_syncer_writes_total",
		Help: "Writes made by the syncers, by direction (down: to the host, up: to the tenant) and verb.",
	}, []string{"cluster", "resource", "direction", "verb"})

	conflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_syncer_conflicts_total",
		Help: "Syncs that met a conflict: a newer object (retried) or a host object Tenantry does not own (left alone).",
	}, []string{"cluster", "resource", "reason"})

	hostRejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_syncer_host_rejections_total",
		Help: "Writes of a copy that the host refused (Pod Security, quota, admission, validation), by the API status reason.",
	}, []string{"cluster", "resource", "reason"})
)

func init() {
	metrics.Registry.MustRegister(driftFound, driftRepaired, writes, conflicts, hostRejections)
}

// clusterSeries are the syncers' metrics that carry a cluster label.
var clusterSeries = []*prometheus.MetricVec{driftFound.MetricVec, driftRepaired.MetricVec, writes.MetricVec, conflicts.MetricVec, hostRejections.MetricVec}

// forgetCluster deletes every series of cluster's, once its syncers have
// stopped: series of gone tenants would otherwise pile up with churn.
func forgetCluster(cluster string) {
	for _, v := range clusterSeries {
		v.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
	}
}
