package builtin

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tenantry/tenantry/pkg/syncer/pods"
)

// allTypes allows every type of Service.
var allTypes = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}

// A Service of a type the policy does not allow is refused, saying which
// field allows it; by default only ClusterIP and ExternalName pass.
func TestServicesRefuseTypesNotAllowed(t *testing.T) {
	for _, tc := range []struct {
		types   []corev1.ServiceType
		typ     corev1.ServiceType
		refused bool
	}{
		{nil, "", false},
		{nil, corev1.ServiceTypeClusterIP, false},
		{nil, corev1.ServiceTypeExternalName, false},
		{nil, corev1.ServiceTypeNodePort, true},
		{nil, corev1.ServiceTypeLoadBalancer, true},
		{[]corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort}, corev1.ServiceTypeNodePort, false},
		{[]corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort}, corev1.ServiceTypeLoadBalancer, true},
		{[]corev1.ServiceType{corev1.ServiceTypeNodePort}, corev1.ServiceTypeExternalName, true},
	} {
		tenant := &corev1.Service{Spec: corev1.ServiceSpec{Type: tc.typ, ExternalName: "example.com"}}
		err := Services(tc.types, nil).Down(tenant, &corev1.Service{})
		switch {
		case tc.refused && (err == nil || !strings.Contains(err.Error(), "spec.hostPolicy.services.allowedTypes")):
			t.Errorf("type %q under %v: %v; want a refusal naming spec.hostPolicy.services.allowedTypes", tc.typ, tc.types, err)
		case !tc.refused && err != nil:
			t.Errorf("type %q under %v: %v; want it synced", tc.typ, tc.types, err)
		}
	}
}

// A claim that names a StorageClass the policy does not list, the empty
// one among them, or a VolumeAttributesClass it does not list, is refused;
// a claim that names none gets the host's default class.
func TestClaimsRefuseClassesNotAllowed(t *testing.T) {
	for _, tc := range []struct {
		name          string
		policy        pods.StoragePolicy
		class, vclass *string
		refusal       string
	}{
		{name: "no class: the host's default", class: nil},
		{name: "a named class by default", class: ptr.To("fast"), refusal: "allowedStorageClasses"},
		{name: "the empty class by default", class: ptr.To(""), refusal: "pre-made host volume"},
		{name: "a listed class", policy: pods.StoragePolicy{AllowedStorageClasses: []string{"fast"}}, class: ptr.To("fast")},
		{name: "the empty class when listed", policy: pods.StoragePolicy{AllowedStorageClasses: []string{""}}, class: ptr.To("")},
		{name: "another class than the listed", policy: pods.StoragePolicy{AllowedStorageClasses: []string{"fast"}}, class: ptr.To("gold"), refusal: `"fast"`},
		{name: "a volume attributes class by default", vclass: ptr.To("iops"), refusal: "allowedVolumeAttributesClasses"},
		{name: "a listed volume attributes class", policy: pods.StoragePolicy{AllowedVolumeAttributesClasses: []string{"iops"}}, vclass: ptr.To("iops")},
	} {
		tenant := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: tc.class, VolumeAttributesClassName: tc.vclass}}
		err := PersistentVolumeClaims(tc.policy).Down(tenant, &corev1.PersistentVolumeClaim{})
		switch {
		case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
			t.Errorf("%s: %v; want a refusal saying %q", tc.name, err, tc.refusal)
		case tc.refusal == "" && err != nil:
			t.Errorf("%s: %v; want it synced", tc.name, err)
		}
	}
}

// What Services' Down writes to a host copy: the tenant's spec without host
// addresses or the host's load balancer, and, on an update, with what the
// host allocated (cluster IPs, node ports, health check port) kept.
func TestServicesDown(t *testing.T) {
	port := func(name string, p, node int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: p, TargetPort: intstr.FromInt32(p), NodePort: node}
	}
	for _, tc := range []struct {
		name         string
		tenant, host corev1.Service
		want         corev1.ServiceSpec
	}{
		{
			name: "created: the tenant's cluster IP and node ports left for the host to allocate",
			tenant: corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.0.0.7", ClusterIPs: []string{"10.0.0.7"},
				Ports: []corev1.ServicePort{port("http", 80, 30080)}, Selector: map[string]string{"app": "web"}}},
			want: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{port("http", 80, 0)}, Selector: map[string]string{"app": "web"}},
		},
		{
			name:   "created headless: None stays, it is no allocation",
			tenant: corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{port("dns", 53, 0)}}},
			want:   corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{port("dns", 53, 0)}},
		},
		{
			name: "updated from ExternalName: the cluster IP left for the host, under the tenant's families",
			tenant: corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.8", ClusterIPs: []string{"10.0.0.8"},
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
				Ports: []corev1.ServicePort{port("http", 80, 0)}}},
			host: corev1.Service{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName,
				ExternalName: "web.example.com", Ports: []corev1.ServicePort{port("http", 80, 0)}}},
			want: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
				Ports: []corev1.ServicePort{port("http", 80, 0)}},
		},
		{
			name: "host addresses and the host's load balancer class stripped",
			tenant: corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ExternalIPs: []string{"203.0.113.9"},
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, LoadBalancerIP: "203.0.113.10", LoadBalancerClass: ptr.To("metal")}},
			want: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
		},
		{
			name: "updated: the host's allocations kept, the tenant's ports and selector taken",
			tenant: corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.0.0.7",
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
				Ports:                 []corev1.ServicePort{port("http", 80, 31111), port("https", 443, 0)}, Selector: map[string]string{"app": "v2"}}},
			host: corev1.Service{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
				ClusterIP: "10.96.0.9", ClusterIPs: []string{"10.96.0.9"}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
				IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack), HealthCheckNodePort: 32000, LoadBalancerClass: ptr.To("host-lb"),
				Ports: []corev1.ServicePort{port("http", 80, 30080)}, Selector: map[string]string{"app": "v1"}}},
			want: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
				ClusterIP: "10.96.0.9", ClusterIPs: []string{"10.96.0.9"}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
				IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack), HealthCheckNodePort: 32000, LoadBalancerClass: ptr.To("host-lb"),
				Ports: []corev1.ServicePort{port("http", 80, 30080), port("https", 443, 0)}, Selector: map[string]string{"app": "v2"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.host.DeepCopy()
			if err := Services(allTypes, nil).Down(tc.tenant.DeepCopy(), host); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(host.Spec, tc.want) {
				t.Errorf("host spec\n got %+v\nwant %+v", host.Spec, tc.want)
			}
		})
	}
}

// Up brings the host's status to the tenant object, and writes only when
// it differs.
func TestStatusUp(t *testing.T) {
	bound := corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	balanced := corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.5"}}}}
	for _, tc := range []struct {
		name         string
		up           func(context.Context, client.Client, client.Object, client.Object) (bool, error)
		tenant, host client.Object
		status       func(client.Object) any
		wantChanged  bool
	}{
		{
			name: "claim bound in the host", up: PersistentVolumeClaims(pods.StoragePolicy{}).Up,
			tenant: &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "data"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}},
			host:   &corev1.PersistentVolumeClaim{Status: bound},
			status: func(o client.Object) any { return o.(*corev1.PersistentVolumeClaim).Status }, wantChanged: true,
		},
		{
			name: "claim already up to date: no write", up: PersistentVolumeClaims(pods.StoragePolicy{}).Up,
			tenant: &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "data"}, Status: bound},
			host:   &corev1.PersistentVolumeClaim{Status: bound},
			status: func(o client.Object) any { return o.(*corev1.PersistentVolumeClaim).Status },
		},
		{
			name: "a load balancer's address, the cluster IPs alike", up: Services(nil, nil).Up,
			tenant: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.9"}},
			host:   &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.9"}, Status: balanced},
			status: func(o client.Object) any { return o.(*corev1.Service).Status }, wantChanged: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tc.tenant).WithStatusSubresource(tc.tenant).Build()
			changed, err := tc.up(t.Context(), c, tc.host, tc.tenant)
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.wantChanged {
				t.Errorf("changed = %t, want %t", changed, tc.wantChanged)
			}
			stored := tc.tenant.DeepCopyObject().(client.Object)
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(tc.tenant), stored); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(tc.status(stored), tc.status(tc.host)) {
				t.Errorf("tenant status stored %+v, want the host's %+v", tc.status(stored), tc.status(tc.host))
			}
		})
	}
}

// A Service's host copy asks for the tenant Service's own cluster IPs only
// where the host allocates them itself: in one of its ranges, past the
// first addresses that host admins pin by hand; a copy that has IPs, a
// headless or ExternalName one, asks for nothing.
func TestServicesPreferTheTenantsIPs(t *testing.T) {
	ranges := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/20"), netip.MustParsePrefix("fd00:96::/96")}
	tenant := func(ips ...string) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIPs: ips,
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack)}}
		if len(ips) > 0 {
			s.Spec.ClusterIP = ips[0]
		}
		return s
	}
	for _, tc := range []struct {
		what   string
		tenant *corev1.Service
		host   corev1.ServiceSpec
		ask    bool
	}{
		{"in the range, past its first 256", tenant("10.96.1.9"), corev1.ServiceSpec{}, true},
		{"both families", tenant("10.96.1.9", "fd00:96::1:9"), corev1.ServiceSpec{}, true},
		{"one of the first 256, where admins pin the DNS", tenant("10.96.0.10"), corev1.ServiceSpec{}, false},
		{"the last of the first 256", tenant("10.96.1.0"), corev1.ServiceSpec{}, false},
		{"outside the host's ranges", tenant("10.0.0.99"), corev1.ServiceSpec{}, false},
		{"one family outside", tenant("10.96.1.9", "fd00:97::1:9"), corev1.ServiceSpec{}, false},
		{"headless", tenant(corev1.ClusterIPNone), corev1.ServiceSpec{}, false},
		{"the copy has the host's IP", tenant("10.96.1.9"), corev1.ServiceSpec{ClusterIP: "10.96.2.2"}, false},
		{"an ExternalName copy", tenant("10.96.1.9"), corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}, false},
	} {
		host := &corev1.Service{Spec: tc.host}
		fields := preferTenantIPs(tc.tenant, host, ranges)
		if asked := len(fields) > 0; asked != tc.ask {
			t.Errorf("%s: asked %v (%v), want %v", tc.what, asked, fields, tc.ask)
			continue
		}
		if tc.ask && (host.Spec.ClusterIP != tc.tenant.Spec.ClusterIP || !slices.Equal(host.Spec.ClusterIPs, tc.tenant.Spec.ClusterIPs) ||
			*host.Spec.IPFamilyPolicy != corev1.IPFamilyPolicyPreferDualStack) {
			t.Errorf("%s: host copy asks for %+v; want the tenant's IPs and families", tc.what, host.Spec)
		}
		if !tc.ask && !equality.Semantic.DeepEqual(host.Spec, tc.host) {
			t.Errorf("%s: host copy changed to %+v", tc.what, host.Spec)
		}
	}
	// A small range keeps 16 (a /24: 256/16 = 16).
	small := netip.MustParsePrefix("10.0.0.0/24")
	if dynamicPart(small, netip.MustParseAddr("10.0.0.16")) || !dynamicPart(small, netip.MustParseAddr("10.0.0.17")) {
		t.Error("a /24 keeps its first 16 addresses for Services that name their IP")
	}
}
