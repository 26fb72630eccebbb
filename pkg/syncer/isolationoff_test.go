package syncer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
)

// With network isolation off, a host namespace gets no isolation
// NetworkPolicy, and one made before (isolation was on) goes.
func TestIsolationOffDeletesEarlierPolicies(t *testing.T) {
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Syncers: []syncer.Syncer{builtin.ConfigMaps()},
		Syncer:  syncer.Options{DisableNetworkIsolation: true},
	})
	ctx := t.Context()
	cm := configMap(unique("open"), map[string]string{"k": "v"})
	if err := w.Tenants["tenant-1"].Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	hostNS := syncer.HostNamespace("tenant-1", cm.Namespace)
	eventually(t, 20*time.Second, "the host copy", func(ctx context.Context) (bool, error) {
		err := w.Host.Get(ctx, w.HostKey("tenant-1", cm.Namespace, cm.Name), &corev1.ConfigMap{})
		return err == nil, err
	})
	key := client.ObjectKey{Namespace: hostNS, Name: syncer.IsolationPolicyName}
	if err := w.Host.Get(ctx, key, &networkingv1.NetworkPolicy{}); !apierrors.IsNotFound(err) {
		t.Fatalf("isolation NetworkPolicy with isolation off: %v; want none", err)
	}

	earlier := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: hostNS, Name: syncer.IsolationPolicyName,
			Labels:      map[string]string{syncer.LabelManagedBy: syncer.ManagedByValue, syncer.LabelCluster: "tenant-1"},
			Annotations: map[string]string{syncer.AnnotationTenantNamespace: cm.Namespace},
		},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if err := w.Host.Create(ctx, earlier); err != nil {
		t.Fatal(err)
	}
	// Nor are the tenant's own policies enforced, which each is told.
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: "deny-all"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if err := w.Tenants["tenant-1"].Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	expectNotEnforced(t, w.Tenants["tenant-1"], policy, "isolation of this cluster is off")
	eventually(t, 10*time.Second, "the earlier isolation NetworkPolicy deleted", func(ctx context.Context) (bool, error) {
		err := w.Host.Get(ctx, key, &networkingv1.NetworkPolicy{})
		return apierrors.IsNotFound(err), fmt.Errorf("NetworkPolicy: %v", err)
	})
}
