package clusterregistry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// A host-side controller is told of a tenant's objects through Watch, and
// of the tenant starting through StateChanges; a watch goes with the
// cluster's app.
func TestAHostControllerWatchesATenant(t *testing.T) {
	mgr, err := manager.New(shared.Host.Config(), manager.Options{
		Logger: logr.Discard(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A short spawn timeout: a watch that does not sync is given up after it.
	r := newRegistry(t, clusterregistry.Options{ManageClient: mgr.GetClient(), SpawnTimeout: 5 * time.Second})
	name, ns := unique("watched"), unique("watched")
	seen := make(chan reconcile.Request, 100)
	c, err := controller.New("watcher-"+name, mgr, controller.Options{Reconciler: reconcile.Func(
		func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			seen <- req
			return reconcile.Result{}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	// The cluster's start, as a request named after it.
	if err := c.Watch(clusterregistry.StateChanges(r, func(_ context.Context, s clusterregistry.Status) []reconcile.Request {
		if s.Name != name || s.State != clusterregistry.StateRunning {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "started", Name: s.Name}}}
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// mapped counts the events of the tenant's ConfigMap "first": once
	// per watch, so twice had the second Watch added one.
	var mapped atomic.Int32
	watch := clusterregistry.WatchInput{Name: "configmaps", Watcher: c, Kind: &corev1.ConfigMap{},
		Handler: handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetNamespace() != ns {
				return nil
			}
			if o.GetName() == "first" {
				mapped.Add(1)
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "tenant", Name: o.GetName()}}}
		})}
	if err := r.Watch(t.Context(), name, watch); !errors.Is(err, clusterregistry.ErrNotExist) {
		t.Fatalf("Watch before the cluster exists: %v, want ErrNotExist", err)
	}
	if err := r.Watch(t.Context(), name, clusterregistry.WatchInput{Name: "incomplete"}); !errors.Is(err, clusterregistry.ErrWatchInput) {
		t.Fatalf("Watch without a kind: %v, want ErrWatchInput", err)
	}
	if err := r.Spawn(name, shared.Tenants[0].Config()); err != nil {
		t.Fatal(err)
	}
	expectRequest(t, seen, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "started", Name: name}})
	for range 2 { // the second is a no-op
		if err := r.Watch(t.Context(), name, watch); err != nil {
			t.Fatalf("Watch: %v", err)
		}
	}
	tenant := newClient(t, shared.Tenants[0])
	ensureNamespace(t, tenant, ns)
	if err := tenant.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "first"}}); err != nil {
		t.Fatal(err)
	}
	expectRequest(t, seen, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "tenant", Name: "first"}})
	if n := mapped.Load(); n != 1 {
		t.Errorf("the tenant ConfigMap's creation was mapped %d times, want once: the second Watch of a name adds none", n)
	}
	if err := r.Watch(t.Context(), name, clusterregistry.WatchInput{Name: "unserved", Watcher: c, Kind: &unservedKind{},
		Handler: watch.Handler}); err == nil {
		t.Error("a watch of a kind the tenant does not serve was taken")
	}

	if err := r.Stop(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	// The watches of the stopped app are gone with it: a Watch of the
	// same name on the re-spawned cluster is a new one.
	if err := r.Watch(t.Context(), name, watch); !errors.Is(err, clusterregistry.ErrNotExist) {
		t.Fatalf("Watch of a stopped cluster: %v, want ErrNotExist", err)
	}
	if err := r.Spawn(name, shared.Tenants[0].Config()); err != nil {
		t.Fatal(err)
	}
	expectRequest(t, seen, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "started", Name: name}})
	if err := r.Watch(t.Context(), name, watch); err != nil {
		t.Fatalf("Watch of the re-spawned cluster: %v", err)
	}
	if err := tenant.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "second"}}); err != nil {
		t.Fatal(err)
	}
	expectRequest(t, seen, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "tenant", Name: "second"}})
}

// expectRequest waits up to 20s for want among the requests seen.
func expectRequest(t *testing.T, seen <-chan reconcile.Request, want reconcile.Request) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case got := <-seen:
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("no request %v within 20s", want)
		}
	}
}

// unservedKind is a kind no API server serves.
type unservedKind struct{ corev1.ConfigMap }

func (u *unservedKind) DeepCopyObject() runtime.Object {
	return &unservedKind{ConfigMap: *u.ConfigMap.DeepCopy()}
}
