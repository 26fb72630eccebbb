package syncer

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// hostAPIServerTTL is how long the host API server's addresses, read for
// a tenant's isolation policy, are reused for the next tenant that starts.
const hostAPIServerTTL = time.Minute

// hostAPIServer reads, and keeps for a while, the addresses at which the
// host's Pods reach the host API server: the kubernetes Service's cluster
// IPs and its endpoints. Tenant Pods are kept from them (see
// isolationPolicy).
type hostAPIServer struct {
	reader client.Reader // uncached

	mu     sync.Mutex
	ips    []string
	readAt time.Time
}

// addresses are the host API server's IPs, sorted.
func (s *hostAPIServer) addresses(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.readAt) < hostAPIServerTTL {
		return s.ips, nil
	}
	ips, err := HostAPIServerAddresses(ctx, s.reader)
	if err != nil {
		return nil, err
	}
	s.ips, s.readAt = ips, time.Now()
	return ips, nil
}

// HostAPIServerAddresses are the addresses, sorted, at which the host's
// Pods reach the host API server: the kubernetes Service's cluster IPs
// and its endpoints, read through reader. It fails until the API server
// has published both, as it does shortly after it starts: a policy
// without them would let Pods reach it.
func HostAPIServerAddresses(ctx context.Context, reader client.Reader) ([]string, error) {
	var svc corev1.Service
	if err := reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, &svc); err != nil {
		return nil, fmt.Errorf("reading the host API server's Service default/kubernetes: %w", err)
	}
	var endpoints discoveryv1.EndpointSliceList
	if err := reader.List(ctx, &endpoints, client.InNamespace(metav1.NamespaceDefault),
		client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		return nil, fmt.Errorf("reading the host API server's endpoints (EndpointSlices of default/kubernetes): %w", err)
	}
	var ips []string
	add := func(ip string) {
		if net.ParseIP(ip) != nil && !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	for _, ip := range svc.Spec.ClusterIPs {
		add(ip)
	}
	services := len(ips)
	for _, es := range endpoints.Items {
		for _, e := range es.Endpoints {
			for _, ip := range e.Addresses {
				add(ip)
			}
		}
	}
	if services == 0 || len(ips) == services {
		// A policy without them would let tenant Pods reach the host API
		// server: wait (the caller retries) until the API server has
		// published both, as it does shortly after it starts.
		return nil, fmt.Errorf("the host API server's Service default/kubernetes has %d cluster IPs and its EndpointSlices name %d further addresses: both are needed to keep tenant Pods from it", services, len(ips)-services)
	}
	slices.Sort(ips)
	return ips, nil
}
