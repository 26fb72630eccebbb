package syncer

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ReasonNotEnforced is the reason of the Warning Event a tenant
// NetworkPolicy gets: Tenantry does not carry tenants' NetworkPolicies to
// the host, so no one enforces it.
const ReasonNotEnforced = "NotEnforced"

// setupNetworkPolicyNotice tells each of a tenant's NetworkPolicies, as it
// is made or its spec changes (and once more when the tenant's app starts),
// that it is not enforced: a policy that seems to hold and does not is
// worse than none. It watches their metadata only.
func setupNetworkPolicyNotice(controllers *tenantControllers, recorder events.EventRecorder, excluded map[string]bool) error {
	mgr := controllers.mgr
	notice := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if excluded[req.Namespace] {
			return reconcile.Result{}, nil
		}
		policy := &metav1.PartialObjectMetadata{}
		policy.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"))
		if err := mgr.GetClient().Get(ctx, req.NamespacedName, policy); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		recorder.Eventf(policy, nil, corev1.EventTypeWarning, ReasonNotEnforced, "Sync",
			"this NetworkPolicy is not enforced: Tenantry does not carry tenants' NetworkPolicies to the host. "+
				"Every Pod of this cluster takes traffic from every other Pod of this cluster, and from no other cluster's (the host's isolation policy)")
		return reconcile.Result{}, nil
	})
	policies := &metav1.PartialObjectMetadata{}
	policies.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"))
	return controllers.run(mgr.GetLogger(), "networkpolicy-notice", 1, notice,
		controllers.objects(policies, predicate.GenerationChangedPredicate{}))
}
