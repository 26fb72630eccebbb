package syncer

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tenantry/tenantry/pkg/syncer/internal/ondemand"
)

// tenantControllers runs a tenant's controllers: the syncers', the
// framework's and the extensions'. Their workers start on demand, so an
// idle tenant's controller holds no goroutine, and one runnable of the
// tenant's manager runs them all.
type tenantControllers struct {
	mgr   manager.Manager
	group *ondemand.Group
}

func newTenantControllers(mgr manager.Manager) (*tenantControllers, error) {
	group := ondemand.NewGroup()
	if err := mgr.Add(group); err != nil {
		return nil, fmt.Errorf("adding the tenant's controllers: %w", err)
	}
	return &tenantControllers{mgr: mgr, group: group}, nil
}

// run adds a controller that runs r for the requests of sources, at most
// workers at once. Added before the tenant starts, its sources sync before
// the tenant counts as started; added later (a syncer whose type arrives),
// it starts at once. It is named after what it does, the same in every
// tenant, not after its tenant: controller-runtime's reconcile series
// carry the name, and series per tenant would grow with the number of
// tenants and outlive them (its own series cannot be deleted); its
// counters and durations so add up over the tenants. Its logs carry the
// cluster key (log's) and the object.
func (t *tenantControllers) run(log logr.Logger, name string, workers int, r reconcile.Reconciler, sources ...source.TypedSource[reconcile.Request]) error {
	log = log.WithValues("controller", name)
	c := ondemand.New(ondemand.Options{
		Name:             name,
		Workers:          workers,
		CacheSyncTimeout: t.mgr.GetControllerOptions().CacheSyncTimeout,
		Logger: func(req reconcile.Request) logr.Logger {
			return log.WithValues("object", req.NamespacedName)
		},
	}, r)
	for _, src := range sources {
		if err := c.Watch(src); err != nil {
			return err
		}
	}
	t.group.Add(c)
	return nil
}

// objects is a source of requests for the tenant's objects of obj's type
// (from the manager's cache) that every predicate lets through.
func (t *tenantControllers) objects(obj client.Object, predicates ...predicate.Predicate) source.TypedSource[reconcile.Request] {
	return source.Kind(t.mgr.GetCache(), obj, &handler.TypedEnqueueRequestForObject[client.Object]{}, predicates...)
}

// namespacesOf is a source of requests for the namespaces (by name, as
// a Namespace's request) of the tenant's objects of obj's type.
func (t *tenantControllers) namespacesOf(obj client.Object) source.TypedSource[reconcile.Request] {
	return source.Kind(t.mgr.GetCache(), obj, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	}))
}
