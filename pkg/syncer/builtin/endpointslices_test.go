package builtin

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// A tenant's own EndpointSlices reach the host with their addresses,
// ports and Service, under Tenantry's manager, and only when every
// address is one of the tenant's running Pods; the slices an
// EndpointSlice controller makes from a selector stay in the tenant.
func TestEndpointSlicesDown(t *testing.T) {
	owners := map[string]string{"10.1.0.5": "alpha", "10.1.0.6": "alpha", "10.1.0.9": "beta"}
	podCluster := func(_ context.Context, ip string) (string, bool, error) {
		c, ok := owners[ip]
		return c, ok, nil
	}
	s := EndpointSlices(podCluster)
	slice := func(managedBy string, ips ...string) *discoveryv1.EndpointSlice {
		e := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "app", Name: "manual-1", Labels: map[string]string{discoveryv1.LabelServiceName: "manual"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		}
		if managedBy != "" {
			e.Labels[discoveryv1.LabelManagedBy] = managedBy
		}
		for _, ip := range ips {
			e.Endpoints = append(e.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To("node-1"),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "app", Name: "web"}})
		}
		return e
	}
	hostCopy := func() *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{syncer.LabelCluster: "alpha"}}}
	}

	if s.Filter(slice("endpointslice-controller.k8s.io", "10.1.0.5")) {
		t.Error("a slice made from a selector is synced; the host makes its own")
	}
	kubernetes := slice("")
	kubernetes.Namespace, kubernetes.Labels[discoveryv1.LabelServiceName] = "default", "kubernetes"
	if s.Filter(kubernetes) {
		t.Error("the tenant API server's own slice is synced")
	}
	for _, managedBy := range []string{"", "endpointslicemirroring-controller.k8s.io", "example.com/operator"} {
		if !s.Filter(slice(managedBy, "10.1.0.5")) {
			t.Errorf("a slice managed by %q is not synced", managedBy)
		}
	}

	host := hostCopy()
	if err := s.Down(slice("endpointslicemirroring-controller.k8s.io", "10.1.0.5", "10.1.0.6"), host); err != nil {
		t.Fatal(err)
	}
	if host.AddressType != discoveryv1.AddressTypeIPv4 || len(host.Endpoints) != 2 || host.Endpoints[1].Addresses[0] != "10.1.0.6" ||
		len(host.Ports) != 1 || *host.Ports[0].Port != 8080 || *host.Endpoints[0].NodeName != "node-1" {
		t.Errorf("host copy %+v: want the tenant's addresses and ports", host)
	}
	if host.Endpoints[0].TargetRef != nil {
		t.Errorf("host copy's targetRef %+v names a tenant object", host.Endpoints[0].TargetRef)
	}
	if host.Labels[discoveryv1.LabelServiceName] != "manual" || host.Labels[discoveryv1.LabelManagedBy] != ManagedByTenantry {
		t.Errorf("host copy's labels %v: want its Service's name and Tenantry as its manager", host.Labels)
	}

	for _, tc := range []struct {
		what string
		in   *discoveryv1.EndpointSlice
		want string
	}{
		{"another tenant's Pod", slice("", "10.1.0.5", "10.1.0.9"), "endpoint 10.1.0.9 is not the address of a running Pod of this cluster"},
		{"an address of no Pod (a node, the host API server)", slice("", "10.1.255.2"), "endpoint 10.1.255.2 is not"},
		{"an FQDN slice", func() *discoveryv1.EndpointSlice {
			e := slice("")
			e.AddressType = discoveryv1.AddressTypeFQDN
			return e
		}(), "address type FQDN"},
	} {
		err := s.Down(tc.in, hostCopy())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a refusal saying %q", tc.what, err, tc.want)
		}
	}
	if err := EndpointSlices(nil).Down(slice("", "10.1.0.5"), hostCopy()); err == nil {
		t.Error("without a look-up of Pod addresses, a slice is synced")
	}
}
