// Package virtualcluster is the host-side controller of VirtualClusters: it
// spawns a tenant cluster's app in the cluster registry when its
// VirtualCluster appears, re-spawns it when its kubeconfig Secret changes or
// the registry reports it failed, and stops it when the VirtualCluster is
// paused or deleted (through a finalizer). Its Ready condition says which of
// these happened, and why not when it could not.
package virtualcluster

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/controlplane/waker"
	"github.com/tenantry/tenantry/pkg/sharding"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
)

// +kubebuilder:rbac:groups=tenantry.dev,resources=virtualclusters,verbs=list;watch;patch
// +kubebuilder:rbac:groups=tenantry.dev,resources=virtualclusters/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller, its logger and its Events.
const ControllerName = "virtualcluster"

// secretRefIndex indexes VirtualClusters by "<namespace>/<name>" of their
// kubeconfig Secret.
const secretRefIndex = "spec.kubeconfigSecretRef"

// Options tune the controller. The zero value is fine.
type Options struct {
	// MaxConcurrentReconciles is how many VirtualClusters are reconciled at
	// once; a Spawn can take up to the spawn timeout, so more workers keep
	// one unreachable tenant from delaying the others. Defaults to 4.
	MaxConcurrentReconciles int

	// TenantQPS and TenantBurst limit the requests that Tenantry sends each
	// tenant's API server, where a kubeconfig says nothing of it (client-go
	// would allow 5 per second). Default to DefaultTenantQPS and
	// DefaultTenantBurst.
	TenantQPS   float64
	TenantBurst int
}

// The default limits of Tenantry's requests to each tenant API server: a
// kube-controller-manager's.
const (
	DefaultTenantQPS   = 50
	DefaultTenantBurst = 100
)

type params struct {
	fx.In

	Manager  manager.Manager
	Registry *clusterregistry.RemoteClusterRegistry
	Options  Options `optional:"true"`
	// Shards, on sharded replicas, says which VirtualClusters this replica
	// runs.
	Shards *sharding.Coordinator `optional:"true"`
	// Fence, on sharded replicas, fences the reconciler's own writes as
	// the registry's.
	Fence clusterregistry.Fence `optional:"true"`
	// Nodes keeps the virtual nodes of clusters whose apps do not run
	// alive (the syncers' module provides it).
	Nodes *pods.NodeHeartbeat `optional:"true"`
	// Waker answers for sleeping control planes' API servers (the control
	// plane controller's module provides it when it runs control planes).
	Waker *waker.Waker `optional:"true"`
}

// Module adds the VirtualCluster controller to the management app.
var Module = fx.Module(ControllerName, fx.Invoke(setup))

func setup(p params) error {
	workers := p.Options.MaxConcurrentReconciles
	if workers <= 0 {
		workers = 4
	}
	replica := ""
	if p.Shards != nil {
		replica = p.Shards.Identity()
	} else if host, err := os.Hostname(); err == nil {
		replica = host
	}
	r := &Reconciler{
		Shards:      p.Shards,
		Fence:       p.Fence,
		Replica:     replica,
		Client:      p.Manager.GetClient(),
		APIReader:   p.Manager.GetAPIReader(),
		Registry:    p.Registry,
		Recorder:    p.Manager.GetEventRecorder("tenantry-" + ControllerName),
		TenantQPS:   p.Options.TenantQPS,
		TenantBurst: p.Options.TenantBurst,
	}
	if p.Nodes != nil {
		r.Nodes = p.Nodes
	}
	if p.Waker != nil {
		r.Waker = p.Waker
		p.Waker.OnWake(func(cluster, user, request string) {
			var vc tenantryv1alpha1.VirtualCluster
			if err := r.Client.Get(context.Background(), types.NamespacedName{Name: cluster}, &vc); err != nil {
				return
			}
			r.Recorder.Eventf(&vc, nil, corev1.EventTypeNormal, "WakeRequested", "Wake",
				"A request of %s to the sleeping control plane's API server (%s) asked it to wake; it is held until the API server answers", user, request)
		})
	}
	if err := p.Manager.GetFieldIndexer().IndexField(context.Background(), &tenantryv1alpha1.VirtualCluster{}, secretRefIndex,
		func(o client.Object) []string {
			ref := o.(*tenantryv1alpha1.VirtualCluster).Spec.KubeconfigSecretRef
			return []string{ref.Namespace + "/" + ref.Name}
		}); err != nil {
		return fmt.Errorf("indexing VirtualClusters by Secret: %w", err)
	}
	b := ctrl.NewControllerManagedBy(p.Manager).
		Named(ControllerName).
		For(&tenantryv1alpha1.VirtualCluster{}).
		// Metadata is enough to notice a changed Secret; its contents are
		// read, uncached, only for the VirtualClusters that use it.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.virtualClustersOfSecret), builder.OnlyMetadata).
		WatchesRawSource(source.Func(r.watchRegistryFailures)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers})
	if r.Shards != nil {
		// Subscribed before the manager runs the Coordinator, so that its
		// first view of the live replicas is not missed.
		b = b.WatchesRawSource(source.Func(r.watchShardChanges(r.Shards.Changes())))
	}
	return b.Complete(r)
}

// watchShardChanges queues every VirtualCluster whenever the live replicas
// change, so that each is taken up or handed over as its owner changed.
func (r *Reconciler) watchShardChanges(changes <-chan struct{}) func(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go r.requeueOnShardChanges(ctx, changes, q)
		return nil
	}
}

func (r *Reconciler) requeueOnShardChanges(ctx context.Context, changes <-chan struct{}, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
		// From the cache (the controller's sources wait for it to sync);
		// a failed list is retried, not left for the next change.
		err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			var list tenantryv1alpha1.VirtualClusterList
			if err := r.Client.List(ctx, &list); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "listing VirtualClusters after the live replicas changed; retrying")
				return false, nil
			}
			r.takeOver(ctx, list.Items)
			for _, vc := range list.Items {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: vc.Name}})
			}
			return true, nil
		})
		if err != nil {
			return // ctx ended
		}
	}
}

// takeOverWorkers bounds the Leases taken at once after a change.
const takeOverWorkers = 16

// takeOver takes, at once and in parallel, the Leases of the
// VirtualClusters this replica owns now and does not hold yet (those of a
// replica that died, or that a joining replica wins), before their
// reconciles start them one by one: a dead replica's tenants are this
// replica's within the lease duration, however long starting them takes.
// A Lease not taken here (its holder still runs the cluster, or an error)
// is left to the reconcile, which retries.
func (r *Reconciler) takeOver(ctx context.Context, vcs []tenantryv1alpha1.VirtualCluster) {
	me := r.Shards.Identity()
	work := make(chan string)
	var wg sync.WaitGroup
	for range takeOverWorkers {
		wg.Go(func() {
			for name := range work {
				if _, err := r.Shards.Acquire(ctx, name); err != nil {
					ctrl.LoggerFrom(ctx).V(1).Info("taking a VirtualCluster's Lease; its reconcile retries", "cluster", name, "error", err.Error())
				}
			}
		})
	}
	for _, vc := range vcs {
		if r.Shards.Owner(vc.Name) == me && !r.Shards.Holds(vc.Name) {
			work <- vc.Name
		}
	}
	close(work)
	wg.Wait()
}

// virtualClustersOfSecret maps a Secret to the VirtualClusters that read it.
func (r *Reconciler) virtualClustersOfSecret(ctx context.Context, secret client.Object) []reconcile.Request {
	var list tenantryv1alpha1.VirtualClusterList
	if err := r.Client.List(ctx, &list, client.MatchingFields{secretRefIndex: secret.GetNamespace() + "/" + secret.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing VirtualClusters of a Secret", "secret", client.ObjectKeyFromObject(secret))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, vc := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: vc.Name}})
	}
	return reqs
}

// watchRegistryFailures queues a VirtualCluster whenever the registry
// reports its cluster failed, so that it is re-spawned.
func (r *Reconciler) watchRegistryFailures(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	cancel := r.Registry.Subscribe(func(s clusterregistry.Status) {
		if s.State == clusterregistry.StateFailed {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: s.Name}})
		}
	})
	context.AfterFunc(ctx, cancel)
	return nil
}
