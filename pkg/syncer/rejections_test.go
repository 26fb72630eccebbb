package syncer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// Any object the host refuses is explained to the tenant once per refusal,
// not once per retry, and synced once the host accepts it: here a Secret
// beyond a host quota on the tenant namespace.
func TestRefusedObjectIsExplainedAndRetried(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	ns := createNamespace(t, tenant, "quota")
	opener := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "opener"}}
	if err := tenant.Create(ctx, opener); err != nil {
		t.Fatal(err)
	}
	hostNamespace := hostNS("tenant-1", ns.Name)
	eventually(t, 10*time.Second, "host namespace "+hostNamespace, func(ctx context.Context) (bool, error) {
		err := shared.Host.Get(ctx, client.ObjectKey{Name: hostNamespace}, &corev1.Namespace{})
		return err == nil, err
	})
	// A host administrator allows the tenant namespace no Secrets.
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: hostNamespace, Name: "no-secrets"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/secrets": resource.MustParse("0")}},
	}
	if err := shared.Host.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	// The host's quota admission may answer from a 30 s cache of "no
	// quota here" (the opener's copy was admitted a moment ago) until its
	// own informer has the quota; its controller's status shows it there.
	eventually(t, 30*time.Second, "the host's quota in force", func(ctx context.Context) (bool, error) {
		if err := shared.Host.Get(ctx, client.ObjectKeyFromObject(quota), quota); err != nil {
			return false, err
		}
		_, enforced := quota.Status.Hard["count/secrets"]
		return enforced, fmt.Errorf("status %+v", quota.Status)
	})

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "credentials"}, StringData: map[string]string{"k": "v"}}
	if err := tenant.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	syncertest.ExpectHostRejected(t, tenant, ns.Name, secret.Name, "quota")
	// It is retried, with backoff: three more refusals, still one Event.
	series := map[string]string{"cluster": "tenant-1", "resource": "secrets", "reason": string(metav1.StatusReasonForbidden)}
	before := tenantrytest.Metric(t, "tenantry_syncer_host_rejections_total", series).GetCounter().GetValue()
	eventually(t, 30*time.Second, "three more refusals", func(context.Context) (bool, error) {
		n := tenantrytest.Metric(t, "tenantry_syncer_host_rejections_total", series).GetCounter().GetValue() - before
		return n >= 3, fmt.Errorf("%g more", n)
	})
	events := syncertest.Events(t, tenant, ns.Name, secret.Name, syncer.ReasonHostRejected)
	if len(events) != 1 {
		t.Fatalf("%d HostRejected Events for one unchanged refusal, want 1", len(events))
	}
	if events[0].Series != nil {
		t.Fatalf("the HostRejected Event was repeated: series %+v", events[0].Series)
	}

	if err := shared.Host.Delete(ctx, quota); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the Secret synced once the host accepts it", func(ctx context.Context) (bool, error) {
		err := shared.Host.Get(ctx, client.ObjectKey{Namespace: hostNamespace, Name: secret.Name}, &corev1.Secret{})
		return err == nil, err
	})
}

// createNamespace creates a tenant namespace, deleted when the test ends.
func createNamespace(t *testing.T, tenant client.Client, prefix string) *corev1.Namespace {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: unique(prefix)}}
	if err := tenant.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), ns) })
	return ns
}
