package builtin

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A manager killed between the two steps of a cluster IP swap leaves the
// tenant Service passing through ExternalName, with its spec recorded; the
// next sync (the restarted manager's) finishes the swap from that record.
func TestClusterIPSwapSurvivesAKill(t *testing.T) {
	ctx := t.Context()
	tenant := newTenantClient(t)
	newService := func(name string) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "web"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			},
		}
		if err := tenant.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	web := newService("web")
	// The host's IP: one the tenant's range has free.
	spare := newService("spare")
	hostIP := spare.Spec.ClusterIP
	if err := tenant.Delete(ctx, spare); err != nil {
		t.Fatal(err)
	}
	host := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: hostIP, ClusterIPs: []string{hostIP}}}

	updates := 0
	killedAfterFirstStep := interceptor.NewClient(tenant, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if updates++; updates > 1 {
				return errors.New("the manager was killed")
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	if _, err := serviceClusterIPUp(ctx, killedAfterFirstStep, host, web.DeepCopy()); err == nil {
		t.Fatal("the swap went through a client that fails its second write")
	}
	var midway corev1.Service
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(web), &midway); err != nil {
		t.Fatal(err)
	}
	if midway.Spec.Type != corev1.ServiceTypeExternalName || midway.Annotations[AnnotationReassigningFrom] == "" {
		t.Fatalf("after the kill: type %s, annotations %v; want ExternalName with the recorded spec", midway.Spec.Type, midway.Annotations)
	}
	if ip, ok := midway.Annotations[AnnotationHostClusterIP]; ok {
		t.Fatalf("a failed write that says nothing about the IP gave up the swap for good (%s %s)", AnnotationHostClusterIP, ip)
	}

	// The restarted manager syncs the Service as it finds it.
	changed, err := serviceClusterIPUp(ctx, tenant, host, midway.DeepCopy())
	if err != nil || !changed {
		t.Fatalf("resuming the swap: changed %v, %v", changed, err)
	}
	var after corev1.Service
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(web), &after); err != nil {
		t.Fatal(err)
	}
	if after.Spec.Type != corev1.ServiceTypeClusterIP || after.Spec.ClusterIP != hostIP || after.Spec.ExternalName != "" ||
		len(after.Spec.Ports) != 1 || after.Spec.Ports[0].Port != 80 || after.Spec.Selector["app"] != "web" || after.UID != web.UID {
		t.Fatalf("after the restart: %+v; want the same Service with the host's IP %s", after.Spec, hostIP)
	}
	if _, ok := after.Annotations[AnnotationReassigningFrom]; ok {
		t.Fatal("the swap's record stayed")
	}
}

// A swap whose host IP the tenant cannot take, and whose own IP another
// Service took meanwhile, ends with a new IP of the tenant's, never stuck
// as an ExternalName.
func TestClusterIPSwapWhoseOwnIPWasTakenGetsANewOne(t *testing.T) {
	ctx := t.Context()
	tenant := newTenantClient(t)
	ports := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: corev1.ServiceSpec{Ports: ports}}
	if err := tenant.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	own := web.Spec.ClusterIP
	// Outside the tenant's service range: the tenant cannot take it.
	host := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "192.0.2.1", ClusterIPs: []string{"192.0.2.1"}}}
	thief := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "thief"},
		Spec: corev1.ServiceSpec{ClusterIP: own, ClusterIPs: []string{own}, Ports: ports}}
	updates := 0
	takenMidway := interceptor.NewClient(tenant, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := c.Update(ctx, obj, opts...); err != nil {
				return err
			}
			if updates++; updates == 1 { // the Service passes through ExternalName: its IP is free
				return c.Create(ctx, thief)
			}
			return nil
		},
	})
	if _, err := serviceClusterIPUp(ctx, takenMidway, host, web.DeepCopy()); err != nil {
		t.Fatalf("the swap: %v", err)
	}
	var after corev1.Service
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(web), &after); err != nil {
		t.Fatal(err)
	}
	if after.Spec.Type != corev1.ServiceTypeClusterIP || after.Spec.ClusterIP == "" || after.Spec.ClusterIP == own ||
		after.Annotations[AnnotationHostClusterIP] != "192.0.2.1" || after.Annotations[AnnotationReassigningFrom] != "" {
		t.Fatalf("after the swap: type %s, IP %s (own %s), annotations %v; want a ClusterIP Service with a new IP, naming the host's",
			after.Spec.Type, after.Spec.ClusterIP, own, after.Annotations)
	}
}

// A Service that once could not take its host's IP, and names it, takes
// the host's new IP once it can, and no longer names the old one: the
// tenant DNS answers with what the annotation says.
func TestClusterIPSwapThatSucceedsDropsTheHostIPOnceNamed(t *testing.T) {
	ctx := t.Context()
	tenant := newTenantClient(t)
	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Annotations: map[string]string{AnnotationHostClusterIP: "192.0.2.1"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if err := tenant.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	// In the tenant's range (envtest's 10.0.0.0/24), and free.
	host := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.200", ClusterIPs: []string{"10.0.0.200"}}}
	if _, err := serviceClusterIPUp(ctx, tenant, host, web.DeepCopy()); err != nil {
		t.Fatalf("the swap: %v", err)
	}
	var after corev1.Service
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(web), &after); err != nil {
		t.Fatal(err)
	}
	if after.Spec.ClusterIP != "10.0.0.200" {
		t.Fatalf("cluster IP %s after the swap, want the host's 10.0.0.200", after.Spec.ClusterIP)
	}
	if ip, ok := after.Annotations[AnnotationHostClusterIP]; ok {
		t.Fatalf("the Service still names %s as the host IP that serves it", ip)
	}

	// A Service whose IP is the host's already, naming another: the name
	// goes.
	after.Annotations = map[string]string{AnnotationHostClusterIP: "192.0.2.1"}
	if err := tenant.Update(ctx, &after); err != nil {
		t.Fatal(err)
	}
	if _, err := serviceClusterIPUp(ctx, tenant, host, after.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(web), &after); err != nil {
		t.Fatal(err)
	}
	if ip, ok := after.Annotations[AnnotationHostClusterIP]; ok || after.Spec.ClusterIP != "10.0.0.200" {
		t.Fatalf("a Service on the host's IP still names %s (IP %s)", ip, after.Spec.ClusterIP)
	}
}

// newTenantClient is a client of a control plane of the test's own, which
// stands for a tenant: the Up functions write to it as to a tenant.
func newTenantClient(t *testing.T) client.WithWatch {
	t.Helper()
	env := tenantrytest.New(t, tenantrytest.Options{})
	c, err := client.NewWithWatch(env.Host.Config(), client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
