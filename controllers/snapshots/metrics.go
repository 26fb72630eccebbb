package snapshots

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

const (
	resultSucceeded = "succeeded"
	resultFailed    = "failed"
)

var (
	snapshotsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_snapshots_total",
		Help: "Scheduled snapshots taken (spec.snapshots), by result: succeeded (pushed) or failed.",
	}, []string{"result"})
	snapshotDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tenantry_snapshot_duration_seconds",
		Help:    "Time to take a scheduled snapshot and push it.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14), // 50 ms to about 7 minutes
	})
	lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantry_snapshot_last_success_timestamp_seconds",
		Help: "When the last scheduled snapshot of a VirtualCluster that this replica pushed was taken (Unix time).",
	}, []string{"cluster"})
)

func init() {
	metrics.Registry.MustRegister(snapshotsTotal, snapshotDuration, lastSuccess)
}
