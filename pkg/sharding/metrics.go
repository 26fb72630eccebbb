package sharding

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The coordinators' metrics, in controller-runtime's registry (served by
// the manager's metrics endpoint), by group and by this replica's identity.
var (
	keysHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantry_sharding_keys_held",
		Help: "Keys (VirtualClusters) whose Lease this replica holds.",
	}, []string{"group", "replica"})

	livePeers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantry_sharding_live_peers",
		Help: "Replicas of the group this replica counts live, itself included.",
	}, []string{"group", "replica"})

	handovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_sharding_handovers_total",
		Help: "Keys this replica took from another replica or a free Lease (acquired) and gave up (released).",
	}, []string{"group", "replica", "direction"})
)

func init() {
	metrics.Registry.MustRegister(keysHeld, livePeers, handovers)
}

// forgetMetrics deletes this replica's series once it has stopped.
func (co *Coordinator) forgetMetrics() {
	labels := prometheus.Labels{"group": co.opts.Group, "replica": co.opts.Identity}
	keysHeld.Delete(labels)
	livePeers.Delete(labels)
	handovers.DeletePartialMatch(labels)
}
