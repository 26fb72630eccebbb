package builtin

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

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
			if err := Services().Down(tc.tenant.DeepCopy(), host); err != nil {
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
			name: "claim bound in the host", up: PersistentVolumeClaims().Up,
			tenant: &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "data"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}},
			host:   &corev1.PersistentVolumeClaim{Status: bound},
			status: func(o client.Object) any { return o.(*corev1.PersistentVolumeClaim).Status }, wantChanged: true,
		},
		{
			name: "claim already up to date: no write", up: PersistentVolumeClaims().Up,
			tenant: &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "data"}, Status: bound},
			host:   &corev1.PersistentVolumeClaim{Status: bound},
			status: func(o client.Object) any { return o.(*corev1.PersistentVolumeClaim).Status },
		},
		{
			name: "a load balancer's address, the cluster IPs alike", up: Services().Up,
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
