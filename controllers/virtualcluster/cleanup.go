package virtualcluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
)

// finalize stops the cluster's app and lets the VirtualCluster go.
func (r *Reconciler) finalize(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) error {
	if !controllerutil.ContainsFinalizer(vc, tenantryv1alpha1.Finalizer) {
		return nil
	}
	if err := r.stop(ctx, vc.Name); err != nil {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "StopFailed", "Stop", "Stopping the cluster's controllers failed: %v", err)
		return err
	}
	if err := r.fenced(vc.Name); err != nil {
		return err
	}
	if err := r.deleteHostNamespaces(ctx, vc); err != nil {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "CleanupFailed", "Delete", "Deleting the cluster's host namespaces failed: %v", err)
		return err
	}
	// Before the finalizer goes, so that no Lease outlives its
	// VirtualCluster.
	if err := r.removeLease(ctx, vc.Name); err != nil {
		return err
	}
	// The Lease is gone: a replica that takes it anew finalizes again,
	// which is idempotent.
	patch := client.MergeFromWithOptions(vc.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(vc, tenantryv1alpha1.Finalizer)
	if err := r.Client.Patch(ctx, vc, patch); err != nil {
		return fmt.Errorf("removing finalizer from %s: %w", vc.Name, client.IgnoreNotFound(err))
	}
	ctrl.LoggerFrom(ctx).Info("cluster stopped for deletion")
	return nil
}

// deleteHostNamespaces deletes the host namespaces that Tenantry made for
// the cluster, and with them every copy in them: with the VirtualCluster
// gone, nothing would keep them in step. Only namespaces carrying both of
// Tenantry's labels for this cluster, and named as Tenantry names the host
// namespace of the tenant namespace they record, are touched; the tenant
// keeps all its objects.
func (r *Reconciler) deleteHostNamespaces(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) error {
	var list corev1.NamespaceList
	if err := r.APIReader.List(ctx, &list, client.MatchingLabels{
		syncer.LabelManagedBy: syncer.ManagedByValue,
		syncer.LabelCluster:   vc.Name,
	}); err != nil {
		return fmt.Errorf("listing host namespaces of %s: %w", vc.Name, err)
	}
	deleted := 0
	for i := range list.Items {
		ns := &list.Items[i]
		if !ns.DeletionTimestamp.IsZero() {
			continue
		}
		if tenantNS, ok := ns.Annotations[syncer.AnnotationTenantName]; !ok || ns.Name != syncer.HostNamespace(vc.Name, tenantNS) {
			// Labelled as Tenantry's, and not where Tenantry puts this
			// cluster's namespaces: someone copied the labels onto a
			// namespace of theirs. It is not deleted.
			ctrl.LoggerFrom(ctx).Info("leaving alone a namespace that carries the cluster's labels but is not one of its host namespaces", "namespace", ns.Name)
			continue
		}
		if err := r.Client.Delete(ctx, ns, client.Preconditions{UID: &ns.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting host namespace %s: %w", ns.Name, err)
		}
		deleted++
	}
	if deleted > 0 {
		ctrl.LoggerFrom(ctx).Info("deleting the cluster's host namespaces", "count", deleted)
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "HostCleanup", "Delete", "Deleting %d host namespaces of the cluster", deleted)
	}
	return nil
}

// deleteHostPods deletes the cluster's Pods in the host, as it goes to
// sleep: only Pods in its own host namespaces, as Tenantry names the
// tenant namespace they record. The tenant keeps its Pods; once awake,
// those whose host Pod is gone end Failed, and their controllers make
// new ones, as after a node's restart.
func (r *Reconciler) deleteHostPods(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) error {
	if err := r.fenced(vc.Name); err != nil {
		return err
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.MatchingLabels{
		syncer.LabelManagedBy: syncer.ManagedByValue,
		syncer.LabelCluster:   vc.Name,
	}); err != nil {
		return fmt.Errorf("listing host Pods of %s: %w", vc.Name, err)
	}
	deleted := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if !p.DeletionTimestamp.IsZero() || p.Namespace != syncer.HostNamespace(vc.Name, p.Annotations[syncer.AnnotationTenantNamespace]) {
			continue
		}
		if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting host Pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		deleted++
	}
	if deleted > 0 {
		ctrl.LoggerFrom(ctx).Info("deleted the sleeping cluster's host Pods", "count", deleted)
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "HostPodsDeleted", "Sleep", "Deleted %d Pods of the cluster in the host: it sleeps", deleted)
	}
	return nil
}
