package snapshots

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
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
		Help: "When the last scheduled snapshot of a VirtualCluster with spec.snapshots was taken (Unix time, from its status.snapshots.lastSuccessful); 0 before its first.",
	}, []string{"cluster"})
)

func init() {
	metrics.Registry.MustRegister(snapshotsTotal, snapshotDuration, lastSuccess)
	// Served from the start, at 0: a rate over them needs no first event.
	for _, result := range []string{resultSucceeded, resultFailed} {
		snapshotsTotal.WithLabelValues(result)
	}
}

// reportLastSuccess sets vc's series to its last success, as its status
// says (so across restarts and replicas), or 0.
func reportLastSuccess(vc *tenantryv1alpha1.VirtualCluster) {
	at := 0.0
	if s := vc.Status.Snapshots; s != nil && s.LastSuccessful != nil {
		at = float64(s.LastSuccessful.Time.Unix())
	}
	lastSuccess.WithLabelValues(vc.Name).Set(at)
}
