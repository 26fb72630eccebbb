// Package controlplane is the host-side controller of provisioned control
// planes: for a VirtualCluster with spec.controlPlane, it runs the
// tenant's kube-apiserver, kube-controller-manager and etcd in a host
// namespace of its own (package pkg/controlplane describes them), keeps
// their certificates fresh, writes the tenant's admin kubeconfig to the
// Secret that spec.kubeconfigSecretRef names, and says in the
// ControlPlaneReady condition how they stand. The VirtualCluster
// controller then syncs the tenant from that Secret, as any other.
package controlplane

import (
	"context"
	"time"

	"go.uber.org/fx"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/activity"
	"github.com/tenantry/tenantry/pkg/controlplane/waker"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
)

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;secrets;persistentvolumeclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=list
// +kubebuilder:rbac:groups=tenantry.dev,resources=virtualclusters,verbs=list;watch;patch
// +kubebuilder:rbac:groups=tenantry.dev,resources=virtualclusters/status,verbs=patch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;patch
// +kubebuilder:rbac:groups="",resources=pods/portforward,verbs=create

// ControllerName names the controller, its logger and its Events.
const ControllerName = "controlplane"

// Finalizer holds a VirtualCluster with spec.controlPlane until its
// control plane is gone from the host.
const Finalizer = "tenantry.dev/control-plane"

// DefaultMaxConcurrentReconciles is the default of Options.MaxConcurrentReconciles.
const DefaultMaxConcurrentReconciles = 4

// Options tune the controller.
type Options struct {
	// Version is the Kubernetes release control planes run unless
	// spec.controlPlane.version says otherwise: the manager's own.
	Version string
	// Versions are the releases this manager can run (it has their
	// images); Version is always among them.
	Versions []string
	// EtcdImage is the image of the embedded etcd.
	EtcdImage string
	// Resources are the components' requests and limits unless
	// spec.controlPlane says otherwise. Zero: controlplane.DefaultResources.
	Resources *controlplane.Resources
	// ManagerNamespace is the namespace of the manager's Pods, let in to
	// control planes' API servers; empty when the manager runs outside
	// the host (see ManagerCIDRs).
	ManagerNamespace string
	// ManagerCIDRs are the addresses from which the manager reaches
	// control planes, when it runs outside the host's Pod network.
	ManagerCIDRs []string
	// StoragePolicy is a VirtualCluster's storage policy (its host policy
	// over the manager's default), which its control plane's claim must
	// meet as the tenant's own claims must. Nil: no class but the
	// default.
	StoragePolicy func(*tenantryv1alpha1.VirtualCluster) pods.StoragePolicy
	// WakeAddress is the IP of this replica that the host's nodes reach,
	// where sleeping control planes' API servers are answered (package
	// waker). Default: $POD_IP, else the machine's default-route address.
	WakeAddress string
	// WakeHoldTimeout bounds how long a request to a sleeping control
	// plane is held while it wakes. Default waker.DefaultHoldTimeout.
	WakeHoldTimeout time.Duration
	// ActivityBindAddress is where the manager takes the reports of the
	// API servers of control planes with spec.sleep (package activity);
	// "0" takes none, and spec.sleep.afterInactivity is then not acted
	// on (controllers/sleep does not run). Default
	// activity.DefaultBindAddress.
	ActivityBindAddress string
	// ActivityURL is where those API servers reach it (a Service in
	// front of the manager's replicas). Default: the bound address, with
	// WakeAddress as its host when it binds every interface.
	ActivityURL string

	// MaxConcurrentReconciles is how many VirtualClusters' control planes
	// are reconciled at once. A reconcile waits on the host's API server
	// and on the control plane's (its readiness, etcd's membership), so
	// with one worker 20 control planes created at once got their Pods
	// one after another, the last 17 s after the first. Default
	// DefaultMaxConcurrentReconciles, as is any value below 1.
	MaxConcurrentReconciles int
}

type params struct {
	fx.In

	Manager manager.Manager
	Options Options `optional:"true"`
}

type setupParams struct {
	fx.In

	Manager manager.Manager
	Options Options `optional:"true"`
	// Activity, when it runs, takes the reports of the API servers of
	// control planes with spec.sleep.
	Activity *activity.Receiver `optional:"true"`
}

// Module adds the control plane controller to the management app, and
// provides the *waker.Waker that answers for sleeping control planes.
var Module = fx.Module(ControllerName, fx.Provide(newWaker, newActivityReceiver), fx.Invoke(setup))

// newWaker makes the Waker and runs it with the manager; nil when
// provisioning is off.
func newWaker(p params) (*waker.Waker, error) {
	if p.Options.Version == "" {
		return nil, nil
	}
	address, err := p.Options.wakeAddress()
	if err != nil {
		return nil, err
	}
	w, err := waker.New(waker.Options{
		Address: address, HoldTimeout: p.Options.WakeHoldTimeout,
		Host: p.Manager.GetClient(), APIReader: p.Manager.GetAPIReader(),
		Logger: p.Manager.GetLogger().WithName("waker"),
	})
	if err != nil {
		return nil, err
	}
	if err := p.Manager.Add(w); err != nil {
		return nil, err
	}
	return w, nil
}

// newActivityReceiver makes the receiver of control planes' reports and
// runs it with the manager; nil when provisioning is off, or it is.
func newActivityReceiver(p params) (*activity.Receiver, error) {
	if p.Options.Version == "" || p.Options.ActivityBindAddress == "0" {
		return nil, nil
	}
	address, err := p.Options.wakeAddress()
	if err != nil {
		return nil, err
	}
	r, err := activity.New(activity.Options{
		BindAddress: p.Options.ActivityBindAddress, URL: p.Options.ActivityURL, Address: address,
		APIReader: p.Manager.GetAPIReader(), Logger: p.Manager.GetLogger().WithName("activity"),
	})
	if err != nil {
		return nil, err
	}
	if err := p.Manager.Add(r); err != nil {
		return nil, err
	}
	return r, nil
}

func setup(p setupParams) error {
	opts := p.Options
	if opts.Version == "" {
		return nil // no release to run: provisioning is off
	}
	r, err := newReconciler(p.Manager, opts)
	if err != nil {
		return err
	}
	if p.Activity != nil {
		r.activityURL = p.Activity.URL()
	}
	// The workloads of a control plane bring its VirtualCluster.
	owner := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetLabels()[controlplane.LabelControlPlane]}}}
	})
	b := ctrl.NewControllerManagedBy(p.Manager).
		Named(ControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.workers()}).
		For(&tenantryv1alpha1.VirtualCluster{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.(*tenantryv1alpha1.VirtualCluster).Spec.ControlPlane != nil
		})))
	for _, o := range []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}, &corev1.Pod{}} {
		b = b.WatchesRawSource(source.Kind(r.workloads, o, owner))
	}
	// A DataStore's change (its endpoints, its Secret's reference) brings
	// the control planes on it.
	b = b.Watches(&tenantryv1alpha1.DataStore{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var vcs tenantryv1alpha1.VirtualClusterList
		if err := p.Manager.GetClient().List(ctx, &vcs); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing VirtualClusters for a DataStore's change", "dataStore", o.GetName())
			return nil
		}
		var out []reconcile.Request
		for _, vc := range vcs.Items {
			if usesDataStore(&vc) == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: vc.Name}})
			}
		}
		return out
	}), builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	if err := b.Complete(r); err != nil {
		return err
	}
	// DataStores: their status, and the count of their control planes.
	users := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := usesDataStore(o.(*tenantryv1alpha1.VirtualCluster)); name != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
		}
		return nil
	})
	return ctrl.NewControllerManagedBy(p.Manager).
		Named(ControllerName+"-datastore").
		For(&tenantryv1alpha1.DataStore{}).
		// Its count changes with a VirtualCluster's spec, its creation and
		// its deletion, not with its status.
		Watches(&tenantryv1alpha1.VirtualCluster{}, users, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(&DataStoreReconciler{client: p.Manager.GetClient(), apiReader: p.Manager.GetAPIReader(),
			recorder: p.Manager.GetEventRecorder("tenantry-" + ControllerName)})
}

// workers is MaxConcurrentReconciles, or its default below 1.
func (o Options) workers() int {
	if o.MaxConcurrentReconciles < 1 {
		return DefaultMaxConcurrentReconciles
	}
	return o.MaxConcurrentReconciles
}
