package virtualcluster

import (
	"context"
	"errors"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// keepNodes has Nodes keep vc's virtual nodes alive, paused or not, from
// its kubeconfig: it says whether it has just taken vc up, while vc's app
// does not run yet. Without a usable kubeconfig there is nothing to keep.
func (r *Reconciler) keepNodes(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, kc kubeconfig) (takenUp bool) {
	if r.Nodes == nil {
		return false
	}
	config, digest, bad := kc.config, kc.digest, kc.bad
	switch {
	case vc.Asleep():
		// Its API server does not run: nothing to beat for.
		r.Nodes.Forget(vc.Name)
		return false
	case bad != nil && bad.transient:
		return false // what runs keeps running; the reconcile tells the rest
	case bad != nil:
		r.Nodes.Forget(vc.Name)
		return false
	}
	kept := r.Nodes.Kept(vc.Name)
	if err := r.Nodes.Keep(vc.Name, fmt.Sprintf("%x", digest), config); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "cannot keep the cluster's virtual nodes alive")
		return false
	}
	_, err := r.Registry.Status(vc.Name)
	return !kept && !vc.Spec.Paused && errors.Is(err, clusterregistry.ErrNotExist)
}
