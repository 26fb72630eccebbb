package syncer_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/netpol"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
)

// hostPolicies are the NetworkPolicies of cluster's host namespace of
// tenant namespace ns, by name.
func hostPolicies(ctx context.Context, host client.Client, cluster, ns string) (map[string]networkingv1.NetworkPolicy, error) {
	var list networkingv1.NetworkPolicyList
	if err := host.List(ctx, &list, client.InNamespace(hostNS(cluster, ns))); err != nil {
		return nil, err
	}
	out := map[string]networkingv1.NetworkPolicy{}
	for _, p := range list.Items {
		out[p.Name] = p
	}
	return out, nil
}

// A tenant's NetworkPolicy is enforced in its host namespace: translated
// beside the isolation policy, which gives up the Pods it selects, while
// open-world policies keep the others open; its namespace selectors stay
// within the tenant, its ipBlocks keep out what the isolation policy
// does. Deleted, it leaves the namespace as it was.
func TestTenantNetworkPoliciesAreEnforced(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	ns := createNamespace(t, tenant, "guarded")
	cm := configMap(unique("c"), nil)
	cm.Namespace = ns.Name
	if err := tenant.Create(ctx, cm); err != nil { // makes the host namespace
		t.Fatal(err)
	}
	// Whole first: the policy takes away what the isolation policy had.
	expectWholeIsolation(t, shared.Host, "tenant-1", ns.Name)
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "db", Labels: map[string]string{"tier": "data"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(5432))}},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: ptr.To(intstr.FromInt32(53))}},
			}},
		},
	}
	if err := tenant.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the policy translated, the isolation policy giving up app=db, open-world policies for the rest", func(ctx context.Context) (bool, error) {
		policies, err := hostPolicies(ctx, shared.Host, "tenant-1", ns.Name)
		if err != nil {
			return false, err
		}
		db, ok := policies["db"]
		if !ok {
			return false, fmt.Errorf("no host copy among %v", slices.Sorted(maps.Keys(policies)))
		}
		if db.Labels["tier"] != "data" || db.Labels[syncer.LabelCluster] != "tenant-1" {
			return false, fmt.Errorf("host copy's labels %v", db.Labels)
		}
		from := db.Spec.Ingress[0].From[0].NamespaceSelector
		if from.MatchLabels[syncer.LabelCluster] != "tenant-1" || from.MatchLabels[netpol.NamespaceLabelKey("team")] != "web" {
			return false, fmt.Errorf("namespace selector %+v: want the tenant's own namespaces labelled team=web", from)
		}
		block := db.Spec.Egress[0].To[0].IPBlock
		if block == nil || block.CIDR != "0.0.0.0/0" || !slices.Contains(block.Except, "169.254.0.0/16") {
			return false, fmt.Errorf("egress %+v: want 0.0.0.0/0 less the metadata addresses", db.Spec.Egress[0].To)
		}
		isolation := policies[syncer.IsolationPolicyName]
		if len(isolation.Spec.Egress) != 0 || len(isolation.Spec.Ingress) != 1 || len(isolation.Spec.Ingress[0].From) != 1 ||
			isolation.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels[syncer.LabelControlPlane] != "tenant-1" {
			return false, fmt.Errorf("isolation policy %+v: want ingress from the control plane alone, no egress", isolation.Spec)
		}
		for _, dir := range []string{"ingress", "egress"} {
			var selectors []string
			for i := 0; ; i++ {
				p, ok := policies[fmt.Sprintf("%s%s-%d", syncer.OpenPolicyPrefix, dir, i)]
				if !ok {
					break
				}
				selectors = append(selectors, metav1.FormatLabelSelector(&p.Spec.PodSelector))
			}
			// The Pods whose app is not db, or who have no app label.
			if want := []string{"app notin (db)"}; !slices.Equal(selectors, want) {
				return false, fmt.Errorf("%s open world %q, want %q", dir, selectors, want)
			}
		}
		return true, nil
	})

	if err := tenant.Delete(ctx, policy); err != nil {
		t.Fatal(err)
	}
	expectWholeIsolation(t, shared.Host, "tenant-1", ns.Name)

	// An egress deny-all takes the isolation policy's egress away; the
	// ingress of every Pod stays open, in a policy of ingress alone.
	denyEgress := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "deny-egress"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}},
	}
	if err := tenant.Create(ctx, denyEgress); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the isolation policy without egress, every Pod's ingress open apart", func(ctx context.Context) (bool, error) {
		policies, err := hostPolicies(ctx, shared.Host, "tenant-1", ns.Name)
		if err != nil {
			return false, err
		}
		isolation := policies[syncer.IsolationPolicyName]
		open := policies[syncer.OpenPolicyPrefix+"ingress-0"]
		_, copied := policies[denyEgress.Name]
		return copied && len(policies) == 3 && len(isolation.Spec.Egress) == 0 && len(isolation.Spec.Ingress) == 1 && len(isolation.Spec.Ingress[0].From) == 1 &&
				slices.Equal(open.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) && len(open.Spec.PodSelector.MatchLabels)+len(open.Spec.PodSelector.MatchExpressions) == 0,
			fmt.Errorf("policies %v, isolation %+v, open %+v", slices.Sorted(maps.Keys(policies)), isolation.Spec, open.Spec)
	})
	if err := tenant.Delete(ctx, denyEgress); err != nil {
		t.Fatal(err)
	}
	expectWholeIsolation(t, shared.Host, "tenant-1", ns.Name)
}

// expectWholeIsolation waits for the isolation policy of cluster's host
// namespace of ns to be whole (the open world in both directions) and
// alone.
func expectWholeIsolation(t *testing.T, host client.Client, cluster, ns string) {
	t.Helper()
	eventually(t, 20*time.Second, "the isolation policy of "+ns+" whole and alone", func(ctx context.Context) (bool, error) {
		policies, err := hostPolicies(ctx, host, cluster, ns)
		if err != nil {
			return false, err
		}
		isolation := policies[syncer.IsolationPolicyName]
		return len(policies) == 1 && len(isolation.Spec.Egress) == 2 && len(isolation.Spec.Ingress) == 1 && len(isolation.Spec.Ingress[0].From) == 3,
			fmt.Errorf("policies %v, isolation %+v", slices.Sorted(maps.Keys(policies)), isolation.Spec)
	})
}

// A tenant policy that selects every Pod leaves no open world; one of a
// name Tenantry keeps in the host is not synced, and one the host cannot
// enforce as written is told so, naming what.
func TestTenantNetworkPoliciesNotEnforcedAsWritten(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	ns := createNamespace(t, tenant, "denied")
	denyAll := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "deny-all"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}},
	}
	reserved := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: syncer.OpenPolicyPrefix + "mine"},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}},
	}
	metadata := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "metadata"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "169.254.169.254/32"}}},
			}},
		},
	}
	for _, p := range []*networkingv1.NetworkPolicy{denyAll, reserved, metadata} {
		if err := tenant.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 20*time.Second, "deny-all's copy, and an isolation policy that leaves nothing open", func(ctx context.Context) (bool, error) {
		policies, err := hostPolicies(ctx, shared.Host, "tenant-2", ns.Name)
		if err != nil {
			return false, err
		}
		isolation := policies[syncer.IsolationPolicyName]
		_, copied := policies["deny-all"]
		_, metadataCopied := policies["metadata"]
		return copied && metadataCopied && len(policies) == 3 && len(isolation.Spec.Egress) == 0 && len(isolation.Spec.Ingress[0].From) == 1,
			fmt.Errorf("policies %v, isolation %+v", slices.Sorted(maps.Keys(policies)), isolation.Spec)
	})
	if err := shared.Host.Get(ctx, shared.HostKey("tenant-2", ns.Name, reserved.Name), &networkingv1.NetworkPolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("the reserved name's host copy: %v; want none", err)
	}
	for _, tc := range []struct {
		policy *networkingv1.NetworkPolicy
		says   string
	}{
		{reserved, "its name is Tenantry's own in the host"},
		{metadata, "spec.egress[0].to[0].ipBlock 169.254.169.254/32 admits nothing here"},
	} {
		expectNotEnforced(t, tenant, tc.policy, tc.says)
	}
	if events := syncertest.Events(t, tenant, denyAll.Namespace, denyAll.Name, syncer.ReasonNotEnforced); len(events) > 0 {
		t.Errorf("deny-all, which the host enforces, was told %q", events[0].Note)
	}
}

// With the translation off, a tenant's NetworkPolicies are not synced,
// the isolation policy stays whole, and each is told it is not enforced.
func TestTenantNetworkPoliciesTranslationOff(t *testing.T) {
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Syncers: []syncer.Syncer{builtin.ConfigMaps()},
		Syncer:  syncer.Options{DisableNetworkPolicyTranslation: true},
	})
	ctx := t.Context()
	tenant := w.Tenants["tenant-1"]
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "deny-all"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if err := tenant.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	if err := tenant.Create(ctx, configMap(unique("c"), nil)); err != nil {
		t.Fatal(err)
	}
	expectNotEnforced(t, tenant, policy, "turns the translation of NetworkPolicies off")
	expectWholeIsolation(t, w.Host, "tenant-1", "default")

	// A copy made while the translation was on goes.
	earlier := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: hostNS("tenant-1", "default"), Name: policy.Name,
			Labels: map[string]string{syncer.LabelManagedBy: syncer.ManagedByValue, syncer.LabelCluster: "tenant-1"},
			Annotations: map[string]string{syncer.AnnotationTenantNamespace: policy.Namespace, syncer.AnnotationTenantName: policy.Name,
				syncer.AnnotationTenantUID: string(policy.UID)},
		},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if err := w.Host.Create(ctx, earlier); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the earlier copy deleted", func(ctx context.Context) (bool, error) {
		err := w.Host.Get(ctx, client.ObjectKeyFromObject(earlier), &networkingv1.NetworkPolicy{})
		return apierrors.IsNotFound(err), fmt.Errorf("the earlier copy: %v", err)
	})
}

// expectNotEnforced waits for a Warning NotEnforced on policy that says
// says.
func expectNotEnforced(t *testing.T, tenant client.Client, policy *networkingv1.NetworkPolicy, says string) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("NotEnforced on %s: %q", policy.Name, says), func(ctx context.Context) (bool, error) {
		var notes []string
		for _, e := range syncertest.Events(t, tenant, policy.Namespace, policy.Name, syncer.ReasonNotEnforced) {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, says) {
				return true, nil
			}
			notes = append(notes, e.Note)
		}
		return false, fmt.Errorf("events %q", notes)
	})
}
