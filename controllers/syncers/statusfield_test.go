package syncers

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// The sync report and the budget reach a VirtualCluster's status whether
// or not anything wrote it before (a new VirtualCluster has no status, to
// which a JSON patch cannot add a field), keep what else the status holds,
// and a budget cleared from a status that has none is no error.
func TestStatusFieldsOnNewAndWrittenStatus(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{
		HostCRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := tenantryv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	host, err := client.New(env.Host.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	newVC := func(name string) *tenantryv1alpha1.VirtualCluster {
		vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: tenantryv1alpha1.VirtualClusterSpec{KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: name}}}
		if err := host.Create(ctx, vc); err != nil {
			t.Fatalf("creating VirtualCluster %s: %v", name, err)
		}
		return vc
	}
	read := func(name string) *tenantryv1alpha1.VirtualCluster {
		var vc tenantryv1alpha1.VirtualCluster
		if err := host.Get(ctx, client.ObjectKey{Name: name}, &vc); err != nil {
			t.Fatalf("reading VirtualCluster %s: %v", name, err)
		}
		return &vc
	}
	report := syncer.SyncReport{Objects: map[string]int{"configmaps": 3}, HostNamespaces: []string{"a-1-app"}}

	newVC("fresh")
	if err := clearBudgetStatus(ctx, host, read("fresh")); err != nil {
		t.Errorf("clearing the budget of a status that has none: %v", err)
	}
	if err := syncStatusReporter(host, "fresh")(ctx, report); err != nil {
		t.Fatalf("the first sync report of a new VirtualCluster: %v", err)
	}
	if got := read("fresh").Status.Sync; got == nil || got.Total != 3 {
		t.Fatalf("status.sync = %+v, want 3 objects", got)
	}
	pods := resource.MustParse("10")
	if err := budgetReporter(host, "fresh", corev1.ResourceList{corev1.ResourcePods: pods})(ctx, corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}); err != nil {
		t.Fatalf("the budget after the sync report: %v", err)
	}
	vc := read("fresh")
	if vc.Status.Sync == nil || vc.Status.Budget == nil || vc.Status.Budget.Pods != "2/10" {
		t.Errorf("status = %+v, want the sync report and a budget of 2/10 Pods", vc.Status)
	}

	// A status someone wrote between the read and the patch is kept.
	stale := newVC("raced")
	written := read("raced")
	written.Status.ObservedGeneration = 1
	if err := host.Status().Update(ctx, written); err != nil {
		t.Fatalf("writing the status: %v", err)
	}
	if err := patchStatusField(ctx, host, stale, "add", "sync", syncStatus(report)); err == nil {
		t.Error("a status added whole over one written since the read: no error")
	}
	if got := read("raced").Status; got.ObservedGeneration != 1 || got.Sync != nil {
		t.Errorf("status = %+v, want the one written, untouched", got)
	}
	if err := syncStatusReporter(host, "raced")(ctx, report); err != nil {
		t.Fatalf("the sync report of a written status: %v", err)
	}
	if got := read("raced").Status; got.ObservedGeneration != 1 || got.Sync == nil {
		t.Errorf("status = %+v, want observedGeneration kept and status.sync added", got)
	}
}
