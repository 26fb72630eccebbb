package mcprovider_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/mcprovider"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// seenBy is the annotation the test's controller writes on every ConfigMap
// it reconciles: the name of the cluster its request came from.
const seenBy = "test.tenantry.dev/seen-by"

// requests records the requests a multicluster controller got.
type requests struct {
	mu  sync.Mutex
	got map[string][]types.NamespacedName
}

func (r *requests) add(req mcreconcile.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[req.ClusterName.String()] = append(r.got[req.ClusterName.String()], req.NamespacedName)
}

func (r *requests) has(cluster string, key types.NamespacedName) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.got[cluster] {
		if k == key {
			return true
		}
	}
	return false
}

// An mcbuilder controller, run by multicluster-runtime's manager over the
// provider, gets each tenant's requests with its name, reads and writes
// through the engaged cluster, stops getting a stopped tenant's, and gets
// a re-spawned tenant's again.
func TestMulticlusterControllerOverTenants(t *testing.T) {
	r := newRegistry(t)
	first, second := shared.Tenants[0], shared.Tenants[1]
	host, err := manager.New(shared.Host.Config(), manager.Options{
		Logger: logr.Discard(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := mcmanager.WithMultiCluster(host, mcprovider.New(r))
	if err != nil {
		t.Fatal(err)
	}
	seen := &requests{got: map[string][]types.NamespacedName{}}
	err = mcbuilder.ControllerManagedBy(mgr).
		Named("seen-by").
		For(&corev1.ConfigMap{}).
		// multicluster-runtime's builder does not read the manager's
		// SkipNameValidation; -count=2 builds this controller twice.
		WithOptions(controller.TypedOptions[mcreconcile.Request]{SkipNameValidation: ptr.To(true)}).
		Complete(mcreconcile.Func(func(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
			seen.add(req)
			cl, err := mgr.GetCluster(ctx, req.ClusterName)
			if err != nil {
				return ctrl.Result{}, err
			}
			cm := &corev1.ConfigMap{}
			if err := cl.GetClient().Get(ctx, req.NamespacedName, cm); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(err)
			}
			if cm.Annotations[seenBy] == req.ClusterName.String() {
				return ctrl.Result{}, nil
			}
			patch := client.MergeFrom(cm.DeepCopy())
			metav1.SetMetaDataAnnotation(&cm.ObjectMeta, seenBy, req.ClusterName.String())
			return ctrl.Result{}, cl.GetClient().Patch(ctx, cm, patch)
		}))
	if err != nil {
		t.Fatal(err)
	}
	// What the manager engages, beside the controller.
	engagements := &recorder{}
	if err := mgr.Add(engagements); err != nil {
		t.Fatal(err)
	}
	if err := r.Spawn(first.Name(), first.Config()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := r.Spawn(second.Name(), second.Config()); err != nil {
		t.Fatal(err)
	}

	tenants := map[string]client.Client{}
	for _, cp := range []*tenantrytest.ControlPlane{first, second} {
		c, err := client.New(cp.Config(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tenants[cp.Name()] = c
	}
	create := func(cluster, name string) types.NamespacedName {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		if err := tenants[cluster].Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tenants[cluster].Delete(context.Background(), cm) })
		return client.ObjectKeyFromObject(cm)
	}
	// The annotation, read straight from the tenant, names the tenant: the
	// request came with its name, and the write went through its client.
	waitSeen := func(cluster string, key types.NamespacedName) {
		t.Helper()
		tenantrytest.Eventually(t, 30*time.Second, fmt.Sprintf("%s in %s seen by its cluster", key, cluster), func(ctx context.Context) (bool, error) {
			var cm corev1.ConfigMap
			if err := tenants[cluster].Get(ctx, key, &cm); err != nil {
				return false, err
			}
			if got := cm.Annotations[seenBy]; got != "" && got != cluster {
				return false, fmt.Errorf("seen by %q", got)
			}
			return cm.Annotations[seenBy] == cluster, nil
		})
	}
	for _, name := range []string{first.Name(), second.Name()} {
		waitSeen(name, create(name, "probe"))
	}

	// Stopped: disengaged, and a change in that tenant is no request any
	// more, while the other's still are.
	engagedFirst := engagements.waitEngaged(t, first.Name(), 1)
	if err := r.Stop(t.Context(), first.Name()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, engagedFirst, "its tenant stopped")
	late := create(first.Name(), "after-stop")
	waitSeen(second.Name(), create(second.Name(), "marker"))
	if seen.has(first.Name(), late) {
		t.Fatalf("a ConfigMap made in %s after it stopped was reconciled", first.Name())
	}
	var cm corev1.ConfigMap
	if err := tenants[first.Name()].Get(t.Context(), late, &cm); err != nil || cm.Annotations[seenBy] != "" {
		t.Fatalf("%s after its tenant stopped: %v, annotations %v", late, err, cm.Annotations)
	}

	// Spawned again: what changed meanwhile is reconciled.
	if err := r.Spawn(first.Name(), first.Config()); err != nil {
		t.Fatal(err)
	}
	waitSeen(first.Name(), late)
	if again := engagements.waitEngaged(t, first.Name(), 2); again.cluster == engagedFirst.cluster {
		t.Fatal("the re-spawned tenant was engaged with the stopped app's cluster")
	}
	if _, err := mgr.GetCluster(t.Context(), "not-a-tenant"); !errors.Is(err, multicluster.ErrClusterNotFound) {
		t.Fatalf("GetCluster of an unknown tenant = %v, want the provider's ErrClusterNotFound", err)
	}
}
