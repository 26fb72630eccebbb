// Package sleep is the host-side controller of spec.sleep.afterInactivity:
// it writes, in a VirtualCluster's status.sleep.lastActivityTime, when
// people last used its API server (as the API server reports: package
// activity), and puts the tenant to sleep (controlplane.AskToSleep) once
// no one but Tenantry has used it for that long. A request to it asleep
// wakes it (package waker).
package sleep

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/activity"
)

// +kubebuilder:rbac:groups=tenantry.dev,resources=virtualclusters,verbs=list;watch;patch
// +kubebuilder:rbac:groups=tenantry.dev,resources=virtualclusters/status,verbs=patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller, its logger and its Events.
const ControllerName = "sleep"

// ReasonInactive is the Event of a tenant put to sleep for its
// inactivity.
const ReasonInactive = "Inactive"

// activityWrites is how often at most a VirtualCluster's last activity is
// written: it is that precise.
const activityWrites = 15 * time.Second

type params struct {
	fx.In

	Manager manager.Manager
	// Activity takes the control planes' reports; nil when the manager
	// runs no control plane or takes no report.
	Activity *activity.Receiver `optional:"true"`
}

// Module adds the controller to the management app.
var Module = fx.Module(ControllerName, fx.Invoke(setup))

func setup(p params) error {
	if p.Activity == nil {
		return nil
	}
	r := &Reconciler{
		client:   p.Manager.GetClient(),
		recorder: p.Manager.GetEventRecorder("tenantry-" + ControllerName),
		written:  map[string]time.Time{},
	}
	p.Activity.OnActivity(r.noteActivity)
	return ctrl.NewControllerManagedBy(p.Manager).
		Named(ControllerName).
		For(&tenantryv1alpha1.VirtualCluster{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.(*tenantryv1alpha1.VirtualCluster).Spec.Sleep != nil
		}))).
		Complete(r)
}

// Reconciler puts tenants to sleep after their spec.sleep.afterInactivity.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder

	mu sync.Mutex
	// written is, per VirtualCluster, the last activity this replica
	// wrote.
	written map[string]time.Time
}

// Reconcile puts vc to sleep if it has been inactive for long enough, or
// looks again when it would be.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var vc tenantryv1alpha1.VirtualCluster
	if err := r.client.Get(ctx, req.NamespacedName, &vc); err != nil {
		if apierrors.IsNotFound(err) {
			r.mu.Lock()
			delete(r.written, req.Name)
			r.mu.Unlock()
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vc.Spec.Sleep == nil || !vc.DeletionTimestamp.IsZero() || vc.Asleep() {
		return ctrl.Result{}, nil
	}
	since := vc.InactiveSince()
	if since.IsZero() {
		return ctrl.Result{}, nil // not running: its readiness brings it back
	}
	after := vc.Spec.Sleep.AfterInactivity.Duration
	if wait := time.Until(since.Add(after)); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := controlplane.AskToSleep(ctx, r.client, vc.Name); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("put the tenant to sleep: no one used it", "cluster", vc.Name, "since", since, "afterInactivity", after)
	r.recorder.Eventf(&vc, nil, corev1.EventTypeNormal, ReasonInactive, "Sleep",
		"No one but Tenantry has used the tenant's API server since %s (spec.sleep.afterInactivity %s): it sleeps; a request to it wakes it",
		since.UTC().Format(time.RFC3339), after)
	return ctrl.Result{}, nil
}

// noteActivity writes that people used cluster at: in its
// status.sleep.lastActivityTime, unless that says as much to within
// activityWrites, or later. The write is locked on the version read, so
// that replicas that take reports at once never move it back.
func (r *Reconciler) noteActivity(cluster string, at time.Time) {
	r.mu.Lock()
	last := r.written[cluster]
	r.mu.Unlock()
	if at.Sub(last) < activityWrites {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log := ctrl.Log.WithName(ControllerName).WithValues("cluster", cluster)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var vc tenantryv1alpha1.VirtualCluster
		if err := r.client.Get(ctx, types.NamespacedName{Name: cluster}, &vc); err != nil {
			return err
		}
		if vc.Spec.Sleep == nil {
			return nil
		}
		if s := vc.Status.Sleep; s != nil && s.LastActivityTime != nil && at.Sub(s.LastActivityTime.Time) < activityWrites {
			r.remember(cluster, s.LastActivityTime.Time)
			return nil
		}
		patch := client.MergeFromWithOptions(vc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if vc.Status.Sleep == nil {
			vc.Status.Sleep = &tenantryv1alpha1.SleepStatus{}
		}
		vc.Status.Sleep.LastActivityTime = &metav1.Time{Time: at.UTC().Truncate(time.Second)}
		if err := r.client.Status().Patch(ctx, &vc, patch); err != nil {
			return err
		}
		r.remember(cluster, at)
		return nil
	})
	if client.IgnoreNotFound(err) != nil {
		log.Error(fmt.Errorf("writing status.sleep.lastActivityTime: %w", err), "not noting activity")
	}
}

func (r *Reconciler) remember(cluster string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at.After(r.written[cluster]) {
		r.written[cluster] = at
	}
}
