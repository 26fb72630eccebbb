package virtualcluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// updateStatus writes the Ready condition and observedGeneration, and
// records an Event when Ready changes or the outcome asks for one.
func (r *Reconciler) updateStatus(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, out readiness) error {
	before := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady)
	changedReason := before == nil || before.Status != out.status || before.Reason != out.reason

	reportReady(vc.Name, out.status == metav1.ConditionTrue, out.reason)
	// Locked: the control plane controller writes its own condition
	// beside, and a merge patch replaces the whole list.
	patch := client.MergeFromWithOptions(vc.DeepCopy(), client.MergeFromWithOptimisticLock{})
	changed := meta.SetStatusCondition(&vc.Status.Conditions, metav1.Condition{
		Type:               tenantryv1alpha1.ConditionReady,
		Status:             out.status,
		Reason:             out.reason,
		Message:            out.message,
		ObservedGeneration: vc.Generation,
	})
	if vc.Status.ObservedGeneration != vc.Generation {
		vc.Status.ObservedGeneration = vc.Generation
		changed = true
	}
	if vc.Status.Replica != r.Replica {
		vc.Status.Replica = r.Replica
		changed = true
	}
	if changed {
		if err := r.fenced(vc.Name); err != nil {
			return err
		}
		read := vc.ResourceVersion
		if err := r.Client.Status().Patch(ctx, vc, patch); err != nil {
			return fmt.Errorf("updating status of %s: %w", vc.Name, err)
		}
		r.wrote(vc.Name, read)
	}

	switch {
	case out.event != "":
		r.Recorder.Eventf(vc, nil, out.event, out.reason, out.action, "%s", out.message)
	case changedReason:
		eventType := corev1.EventTypeNormal
		if out.status != metav1.ConditionTrue && !slices.Contains([]string{tenantryv1alpha1.ReasonPaused, tenantryv1alpha1.ReasonControlPlaneNotReady, tenantryv1alpha1.ReasonSleepRequested}, out.reason) {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(vc, nil, eventType, out.reason, "Reconcile", "%s", out.message)
	}
	return nil
}

// ownWritesRecheck is when a VirtualCluster read from behind the
// reconciler's own writes is looked at again, should the watch event of
// those writes not come first.
const ownWritesRecheck = time.Second

// wrote records that a write of VirtualCluster name replaced it at
// resourceVersion read.
func (r *Reconciler) wrote(name, read string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.superseded == nil {
		r.superseded = map[string][]string{}
	}
	r.superseded[name] = append(r.superseded[name], read)
}

// behindOwnWrites says whether vc was read at a resourceVersion that the
// reconciler's own writes replaced. A read past them (the writes seen, or
// someone else's later write) forgets them.
func (r *Reconciler) behindOwnWrites(vc *tenantryv1alpha1.VirtualCluster) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Contains(r.superseded[vc.Name], vc.ResourceVersion) {
		return true
	}
	delete(r.superseded, vc.Name)
	return false
}
