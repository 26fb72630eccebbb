package builtin

import (
	"context"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// ManagedByTenantry is the endpointslice.kubernetes.io/managed-by value of
// the host copies of a tenant's own EndpointSlices: the host's EndpointSlice
// controllers leave slices of another manager alone.
const ManagedByTenantry = "tenantry.dev"

// endpointSliceController is the managed-by value of the slices that an
// EndpointSlice controller makes for a Service's selector: the host makes
// its own from the host Pods.
const endpointSliceController = "endpointslice-controller.k8s.io"

// podLookupTimeout bounds one look-up of an endpoint's address.
const podLookupTimeout = 5 * time.Second

// PodClusterFunc says which tenant cluster's running host Pod holds ip,
// as pods.Addresses.PodCluster does.
type PodClusterFunc func(ctx context.Context, ip string) (cluster string, ok bool, err error)

// EndpointSlices syncs the EndpointSlices that a tenant makes itself (for
// a Service without a selector), or that its controller-manager mirrors
// from the Endpoints it makes, so that the Service's host copy, which has
// no selector either, reaches what the tenant named. The slices an
// EndpointSlice controller makes from a selector are not synced: the host
// makes its own, from the host Pods.
//
// Every address must be that of a running Pod of the same tenant
// (podCluster says whose): the host's kube-proxy sends the Service's
// traffic to the addresses, from wherever it comes (a NodePort, another
// Pod), past the tenant's isolation policy, so a slice that names a node,
// the host API server or another tenant's Pod is refused. A nil podCluster
// refuses every slice. Only IPv4 and IPv6 slices are synced; an endpoint's
// targetRef, which names a tenant object, is left out.
func EndpointSlices(podCluster PodClusterFunc) syncer.Syncer {
	return syncer.Syncer{
		Name:             "endpointslices",
		Object:           func() client.Object { return &discoveryv1.EndpointSlice{} },
		CopyUserMetadata: true,
		Filter: func(t client.Object) bool {
			labels := t.GetLabels()
			if labels[discoveryv1.LabelManagedBy] == endpointSliceController {
				return false
			}
			// The tenant API server's own, as its Service is.
			return t.GetNamespace() != metav1.NamespaceDefault || labels[discoveryv1.LabelServiceName] != "kubernetes"
		},
		Down: func(t, h client.Object) error {
			tenant, host := t.(*discoveryv1.EndpointSlice), h.(*discoveryv1.EndpointSlice)
			if tenant.AddressType != discoveryv1.AddressTypeIPv4 && tenant.AddressType != discoveryv1.AddressTypeIPv6 {
				return syncer.Refuse("an EndpointSlice of address type %s: the host serves IPv4 and IPv6 ones", tenant.AddressType)
			}
			cluster := host.Labels[syncer.LabelCluster]
			for _, e := range tenant.Endpoints {
				for _, ip := range e.Addresses {
					if err := ownPodAddress(podCluster, cluster, ip); err != nil {
						return err
					}
				}
			}
			host.AddressType = tenant.AddressType
			host.Ports = tenant.Ports
			host.Endpoints = make([]discoveryv1.Endpoint, len(tenant.Endpoints))
			for i, e := range tenant.Endpoints {
				e.TargetRef = nil
				host.Endpoints[i] = e
			}
			// The Service's host copy has the same name; kubernetes.io/
			// labels are not copied by default.
			if host.Labels == nil {
				host.Labels = map[string]string{}
			}
			if name, ok := tenant.Labels[discoveryv1.LabelServiceName]; ok {
				host.Labels[discoveryv1.LabelServiceName] = name
			} else {
				delete(host.Labels, discoveryv1.LabelServiceName)
			}
			host.Labels[discoveryv1.LabelManagedBy] = ManagedByTenantry
			return nil
		},
	}
}

// ownPodAddress refuses ip unless it is the address of a running Pod of
// cluster.
func ownPodAddress(podCluster PodClusterFunc, cluster, ip string) error {
	if podCluster == nil {
		return syncer.Refuse("endpoint %s: the manager looks up no Pod addresses, and takes no endpoint", ip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), podLookupTimeout)
	defer cancel()
	owner, ok, err := podCluster(ctx, ip)
	if err != nil {
		return fmt.Errorf("looking up the Pod of endpoint %s: %w", ip, err)
	}
	if !ok || owner != cluster {
		return syncer.Refuse("endpoint %s is not the address of a running Pod of this cluster: an EndpointSlice may name only the cluster's own Pods", ip)
	}
	return nil
}
