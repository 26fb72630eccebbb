package tenantdns

import (
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The tenant DNS server's metrics, in controller-runtime's registry.
var (
	queries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantry_dns_queries_total",
		Help: "DNS queries of tenants' Pods, by kind (cluster: a name of the tenant's; forwarded: upstream; refused: from no tenant Pod) and response code.",
	}, []string{"cluster", "kind", "rcode"})

	queryDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenantry_dns_query_duration_seconds",
		Help:    "How long the tenant DNS server took to answer, by kind.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"kind"})
)

func init() {
	metrics.Registry.MustRegister(queries, queryDuration)
}

// observe counts and times one answered query; cluster is "" when no
// tenant asked.
func observe(cluster, kind string, rcode int, took time.Duration) {
	queries.WithLabelValues(cluster, kind, dns.RcodeToString[rcode]).Inc()
	queryDuration.WithLabelValues(kind).Observe(took.Seconds())
}

// forgetCluster deletes a tenant's series once it is gone.
func forgetCluster(cluster string) {
	queries.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
}
