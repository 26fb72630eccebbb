package virtualcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// handoverPoll is how often a replica that owns a VirtualCluster tries to
// take its Lease while the previous owner still holds it.
const handoverPoll = time.Second

// claim says whether this replica runs vc: it owns vc among the live
// replicas and holds its Lease. A VirtualCluster owned by another replica
// is stopped here, if it ran here, then its Lease is given up, so that its
// new owner takes it at once.
func (r *Reconciler) claim(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) (ctrl.Result, bool, error) {
	name := vc.Name
	switch owner := r.Shards.Owner(name); owner {
	case "":
		// The live replicas are not known yet, or this one is lost; a
		// change of the live replicas queues every VirtualCluster again.
		return ctrl.Result{}, false, nil
	case r.Shards.Identity():
	default:
		return ctrl.Result{}, false, r.handOver(ctx, vc, owner)
	}
	held, err := r.Shards.Acquire(ctx, name)
	if err != nil {
		return ctrl.Result{}, false, fmt.Errorf("VirtualCluster %s: %w", name, err)
	}
	if !held {
		// The previous owner still runs it: it gives the Lease up once it
		// has stopped the cluster, or loses it once its own Lease runs out.
		ctrl.LoggerFrom(ctx).V(1).Info("waiting for the previous owner to hand the cluster over")
		return ctrl.Result{RequeueAfter: handoverPoll}, false, nil
	}
	return ctrl.Result{}, true, nil
}

// handOver stops vc's cluster if it runs here and gives its Lease up, if
// this replica took it, for owner to take.
func (r *Reconciler) handOver(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, owner string) error {
	_, err := r.Registry.Status(vc.Name)
	running := err == nil
	if running {
		ctrl.LoggerFrom(ctx).Info("handing the cluster over to the replica that owns it now", "owner", owner)
		if err := r.stop(ctx, vc.Name); err != nil {
			return err
		}
	}
	if err := r.Shards.Release(ctx, vc.Name); err != nil {
		return fmt.Errorf("handing VirtualCluster %s over: %w", vc.Name, err)
	}
	if running {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "HandedOver", "Stop",
			"Replica %s stopped the cluster's controllers and handed it over to replica %s", r.Replica, owner)
	}
	return nil
}

// removeLease deletes the Lease of a VirtualCluster that is gone, if this
// replica took it.
func (r *Reconciler) removeLease(ctx context.Context, name string) error {
	if r.Shards == nil {
		return nil
	}
	if err := r.Shards.Remove(ctx, name); err != nil {
		return fmt.Errorf("VirtualCluster %s: %w", name, err)
	}
	return nil
}

// removeOrphanLease deletes the Lease of a VirtualCluster that is gone
// (deleted without its finalizer, say) while a replica that died held it:
// the replica that owns the name takes the Lease, as from any dead holder,
// and deletes it. While a live replica holds it, that replica deletes it
// itself; this one looks again until it is gone.
func (r *Reconciler) removeOrphanLease(ctx context.Context, name string) (ctrl.Result, error) {
	if r.Shards == nil || r.Shards.Owner(name) != r.Shards.Identity() {
		return ctrl.Result{}, nil
	}
	held, err := r.Shards.Acquire(ctx, name)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("VirtualCluster %s is gone; taking its Lease to delete it: %w", name, err)
	}
	if !held {
		return ctrl.Result{RequeueAfter: handoverPoll}, nil
	}
	return ctrl.Result{}, r.removeLease(ctx, name)
}

// fenced is an error once this replica may no longer write for the
// VirtualCluster name (another replica may run it now): each of the
// reconciler's own writes for it asks first.
func (r *Reconciler) fenced(name string) error {
	if r.Fence == nil {
		return nil
	}
	return r.Fence(name)
}
