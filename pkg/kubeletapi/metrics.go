package kubeletapi

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The kubelet API's metrics, in controller-runtime's registry.
var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_kubelet_api_requests_total",
		Help: "Kubelet API requests of tenants' API servers, counted once answered, by endpoint (logs, exec, attach, portforward) and HTTP status (101: a stream was opened).",
	}, []string{"cluster", "endpoint", "code"})

	refusedConnections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_kubelet_api_refused_connections_total",
		Help: "Connections to the kubelet API of virtual nodes closed at once, by reason: too-many open (of all sources or of one), or from a tenant-pod.",
	}, []string{"reason"})

	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenantry_kubelet_api_request_duration_seconds",
		Help:    "How long kubelet API requests took, streams included, by endpoint.",
		Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
	}, []string{"endpoint"})
)

func init() {
	metrics.Registry.MustRegister(requests, requestDuration, refusedConnections)
	for _, reason := range []string{reasonTooMany, reasonTenantPod} {
		refusedConnections.WithLabelValues(reason) // served at 0 until one is refused
	}
}

// count counts one answered request; cluster is "" when no tenant was
// found.
func count(cluster, endpoint string, code int) {
	requests.WithLabelValues(cluster, endpoint, strconv.Itoa(code)).Inc()
}

// observeDuration times one request, from its start to its end.
func observeDuration(endpoint string, took time.Duration) {
	requestDuration.WithLabelValues(endpoint).Observe(took.Seconds())
}

// forgetCluster deletes a tenant's series once it is gone.
func forgetCluster(cluster string) {
	requests.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
}
