package virtualcluster

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// readyGauge is each VirtualCluster's Ready condition, as this replica
// last wrote it: the series of a VirtualCluster that another replica runs,
// or that is gone, is deleted.
var readyGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "tenantry_virtualcluster_ready",
	Help: "1 if the VirtualCluster is Ready, 0 if not, labelled with the reason of its Ready condition; a series per VirtualCluster this replica reconciles.",
}, []string{"cluster", "reason"})

func init() {
	metrics.Registry.MustRegister(readyGauge)
}

// reportReady sets cluster's series to its Ready condition.
func reportReady(cluster string, ready bool, reason string) {
	forgetReady(cluster)
	v := 0.0
	if ready {
		v = 1
	}
	readyGauge.WithLabelValues(cluster, reason).Set(v)
}

// forgetReady deletes cluster's series: it is gone, or runs elsewhere.
func forgetReady(cluster string) {
	readyGauge.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
}
