package clusterregistry_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// Spawn a cluster with a module that registers one reconciler, see it
// reconcile an object of that cluster, and stop it.
func Example() {
	env, err := tenantrytest.Start(context.Background(), tenantrytest.Options{Tenants: 1})
	if err != nil {
		panic(err)
	}
	defer func() { _ = env.Stop() }()
	host, err := client.New(env.Host.Config(), client.Options{})
	if err != nil {
		panic(err)
	}

	seen := make(chan string, 1)
	var once sync.Once
	// The module: one reconciler for ConfigMaps, in whichever cluster it is
	// spawned for.
	configMapWatcher := fx.Module("configmap-watcher",
		fx.Invoke(func(t clusterregistry.Tenant) error {
			return builder.ControllerManagedBy(t.Manager).
				For(&corev1.ConfigMap{}).
				Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
					if req.Name == "hello" {
						once.Do(func() { seen <- fmt.Sprintf("%s: reconciled %s", t.ClusterName, req) })
					}
					return reconcile.Result{}, nil
				}))
		}),
	)

	registry := clusterregistry.New(logr.Discard(), host, configMapWatcher)
	tenant := env.Tenants[0]
	if err := registry.Spawn("tenant-1", tenant.Config()); err != nil {
		panic(err)
	}

	// Act inside the tenant cluster from outside its app.
	err = registry.WithClient("tenant-1", func(c client.Client) error {
		return c.Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello"},
		})
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(<-seen)

	status, _ := registry.Status("tenant-1")
	fmt.Println("state:", status.State)
	if err := registry.Stop(context.Background(), "tenant-1"); err != nil {
		panic(err)
	}
	fmt.Println("clusters left:", len(registry.List()))
	// Output:
	// tenant-1: reconciled default/hello
	// state: Running
	// clusters left: 0
}
