package syncer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
)

// A Service that claims host addresses or the host's load balancer is
// synced without them, and the tenant told.
func TestHostPolicyStripsServiceAddresses(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("claimer")},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerIP:    "203.0.113.7",
			LoadBalancerClass: ptr.To("example.com/internal"),
			ExternalIPs:       []string{"203.0.113.8"},
			Ports:             []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if err := tenant.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), svc) })
	eventually(t, 20*time.Second, "the host Service without the tenant's addresses", func(ctx context.Context) (bool, error) {
		var host corev1.Service
		if err := shared.Host.Get(ctx, shared.HostKey("tenant-2", svc.Namespace, svc.Name), &host); err != nil {
			return false, err
		}
		return host.Spec.LoadBalancerIP == "" && host.Spec.LoadBalancerClass == nil && len(host.Spec.ExternalIPs) == 0,
			fmt.Errorf("loadBalancerIP %q, class %v, externalIPs %v", host.Spec.LoadBalancerIP, host.Spec.LoadBalancerClass, host.Spec.ExternalIPs)
	})
	syncertest.ExpectStripped(t, tenant, svc.Namespace, svc.Name,
		"loadBalancerIP 203.0.113.7", "externalIPs 203.0.113.8", "loadBalancerClass example.com/internal")
}

// Every host namespace of a tenant gets the isolation NetworkPolicy: its
// Pods take traffic only from the same VirtualCluster's Pods. One deleted
// or changed by hand is restored, and a settled one is not rewritten.
func TestHostNamespacesAreIsolated(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	ns := createNamespace(t, tenant, "isolated")
	cm := configMap(unique("c"), nil)
	cm.Namespace = ns.Name
	if err := tenant.Create(ctx, cm); err != nil { // makes the host namespace
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: hostNS("tenant-1", ns.Name), Name: syncer.IsolationPolicyName}
	var policy networkingv1.NetworkPolicy
	expectPolicy := func(what string) {
		t.Helper()
		eventually(t, 20*time.Second, what, func(ctx context.Context) (bool, error) {
			if err := shared.Host.Get(ctx, key, &policy); err != nil {
				return false, err
			}
			from := policy.Spec.Ingress
			ok := len(policy.Spec.PolicyTypes) == 1 && policy.Spec.PolicyTypes[0] == networkingv1.PolicyTypeIngress &&
				len(from) == 1 && len(from[0].From) == 2 && from[0].From[0].NamespaceSelector != nil &&
				from[0].From[0].NamespaceSelector.MatchLabels[syncer.LabelCluster] == "tenant-1" &&
				from[0].From[1].NamespaceSelector != nil && len(from[0].From[1].NamespaceSelector.MatchExpressions) == 1 &&
				from[0].From[1].NamespaceSelector.MatchExpressions[0].Operator == metav1.LabelSelectorOpDoesNotExist
			return ok, fmt.Errorf("policy %+v", policy.Spec)
		})
	}
	expectPolicy("the isolation NetworkPolicy in the host namespace")
	settled := policy.ResourceVersion

	policy.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}} // allow everything
	if err := shared.Host.Update(ctx, &policy); err != nil {
		t.Fatal(err)
	}
	expectPolicy("the isolation NetworkPolicy restored after an edit")
	// A rule added beside Tenantry's, that lets everyone in, goes too.
	policy.Spec.Ingress = append(policy.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
	if err := shared.Host.Update(ctx, &policy); err != nil {
		t.Fatal(err)
	}
	expectPolicy("the isolation NetworkPolicy restored after a rule was added")
	if err := shared.Host.Delete(ctx, &policy); err != nil {
		t.Fatal(err)
	}
	expectPolicy("the isolation NetworkPolicy restored after a deletion")
	settled = policy.ResourceVersion
	// A policy rewritten on every event would show a new resourceVersion
	// within moments (the patroller runs every 300 ms here).
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := shared.Host.Get(ctx, key, &policy); err != nil {
			return false, err
		}
		return policy.ResourceVersion != settled, nil
	})
	if err == nil {
		t.Fatalf("the settled policy was rewritten: resourceVersion %s, then %s", settled, policy.ResourceVersion)
	}
}
