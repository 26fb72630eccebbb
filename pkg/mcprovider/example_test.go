package mcprovider_test

import (
	"context"
	"log"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/mcprovider"
)

// What a program of its own has: the host's config and client, and the
// tenants' configs.
var (
	hostConfig   *rest.Config
	hostClient   client.Client
	tenantConfig *rest.Config
)

// A multicluster-runtime controller over the tenants of a registry: the
// registry spawns and stops the tenants, the provider engages them, and
// the manager's Start starts the provider.
func ExampleNew() {
	ctx := ctrl.SetupSignalHandler()
	registry := clusterregistry.New(logr.Discard(), hostClient)
	defer func() { _ = registry.Close(context.Background()) }()

	mgr, err := mcmanager.New(hostConfig, mcprovider.New(registry), manager.Options{})
	if err != nil {
		log.Fatal(err)
	}
	err = mcbuilder.ControllerManagedBy(mgr).
		Named("multicluster-configmaps").
		For(&corev1.ConfigMap{}).
		Complete(mcreconcile.Func(func(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
			cl, err := mgr.GetCluster(ctx, req.ClusterName)
			if err != nil {
				return ctrl.Result{}, err
			}
			var cm corev1.ConfigMap
			if err := cl.GetClient().Get(ctx, req.NamespacedName, &cm); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(err)
			}
			ctrl.LoggerFrom(ctx).Info("ConfigMap", "cluster", req.ClusterName, "name", req.NamespacedName)
			return ctrl.Result{}, nil
		}))
	if err != nil {
		log.Fatal(err)
	}

	if err := registry.Spawn("tenant-1", tenantConfig); err != nil {
		log.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
}
