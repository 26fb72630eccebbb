package syncer_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
)

// A Service that claims host addresses is synced without them, and the
// tenant told; one that asks for the host's load balancer is refused by
// the default policy, and the tenant told which policy field allows it.
func TestHostPolicyStripsServiceAddresses(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	ports := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("claimer")},
		Spec:       corev1.ServiceSpec{ExternalIPs: []string{"203.0.113.8"}, Ports: ports},
	}
	balanced := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("balanced")},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerIP:    "203.0.113.7",
			LoadBalancerClass: ptr.To("example.com/internal"),
			Ports:             ports,
		},
	}
	for _, s := range []*corev1.Service{svc, balanced} {
		if err := tenant.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tenant.Delete(context.Background(), s) })
	}
	eventually(t, 20*time.Second, "the host Service without the tenant's addresses", func(ctx context.Context) (bool, error) {
		var host corev1.Service
		if err := shared.Host.Get(ctx, shared.HostKey("tenant-2", svc.Namespace, svc.Name), &host); err != nil {
			return false, err
		}
		return len(host.Spec.ExternalIPs) == 0, fmt.Errorf("externalIPs %v", host.Spec.ExternalIPs)
	})
	syncertest.ExpectStripped(t, tenant, svc.Namespace, svc.Name, "externalIPs 203.0.113.8")
	syncertest.ExpectHostRejected(t, tenant, balanced.Namespace, balanced.Name, "spec.hostPolicy.services.allowedTypes")
	if err := shared.Host.Get(ctx, shared.HostKey("tenant-2", balanced.Namespace, balanced.Name), &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("the LoadBalancer Service's host copy: %v; want none", err)
	}
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
	// The host API server's addresses, which tenant Pods may not reach.
	var kubernetes corev1.Service
	if err := shared.Host.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &kubernetes); err != nil {
		t.Fatal(err)
	}
	apiServer := []string{kubernetes.Spec.ClusterIP + "/32"}
	var endpoints discoveryv1.EndpointSliceList
	if err := shared.Host.List(ctx, &endpoints, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	for _, es := range endpoints.Items {
		for _, e := range es.Endpoints {
			apiServer = append(apiServer, e.Addresses[0]+"/32")
		}
	}
	var policy networkingv1.NetworkPolicy
	expectPolicy := func(what string) {
		t.Helper()
		eventually(t, 20*time.Second, what, func(ctx context.Context) (bool, error) {
			if err := shared.Host.Get(ctx, key, &policy); err != nil {
				return false, err
			}
			from := policy.Spec.Ingress
			if len(policy.Spec.Egress) != 2 || len(policy.Spec.Egress[1].To) != 2 {
				return false, fmt.Errorf("egress %+v", policy.Spec.Egress)
			}
			v4, v6 := policy.Spec.Egress[1].To[0].IPBlock, policy.Spec.Egress[1].To[1].IPBlock
			// Where the clouds serve metadata, over IPv4 and IPv6.
			denied := slices.Concat(v4.Except, v6.Except)
			for _, cidr := range []string{"169.254.0.0/16", "100.100.100.200/32", "168.63.129.16/32", "fd00:ec2::254/128", "fd00:ec2::23/128", "fd20:ce::254/128", "fe80::/10"} {
				if !slices.Contains(denied, cidr) {
					return false, fmt.Errorf("egress to %s is not denied: %+v", cidr, policy.Spec.Egress[1])
				}
			}
			ok := len(policy.Spec.PolicyTypes) == 2 && v4.CIDR == "0.0.0.0/0" && v6.CIDR == "::/0" &&
				slices.ContainsFunc(v4.Except, func(cidr string) bool { return slices.Contains(apiServer, cidr) }) &&
				len(from) == 1 && len(from[0].From) == 3 && from[0].From[0].NamespaceSelector != nil &&
				from[0].From[0].NamespaceSelector.MatchLabels[syncer.LabelCluster] == "tenant-1" &&
				from[0].From[1].NamespaceSelector != nil && len(from[0].From[1].NamespaceSelector.MatchExpressions) == 1 &&
				from[0].From[1].NamespaceSelector.MatchExpressions[0].Operator == metav1.LabelSelectorOpDoesNotExist &&
				// Its own control plane, where Tenantry runs it.
				from[0].From[2].NamespaceSelector != nil && from[0].From[2].NamespaceSelector.MatchLabels[syncer.LabelControlPlane] == "tenant-1"
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
