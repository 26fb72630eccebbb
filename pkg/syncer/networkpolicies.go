package syncer

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/syncer/netpol"
)

// ReasonNotEnforced is the reason of the Warning Event a tenant
// NetworkPolicy gets when the host does not enforce it, or not as
// written: the message says why.
const ReasonNotEnforced = "NotEnforced"

// networkPolicySyncerName names the syncer of tenants' NetworkPolicies.
const networkPolicySyncerName = "networkpolicies"

// networkPolicySyncer syncs a tenant's NetworkPolicies into its host
// namespaces, translated (netpol.Translate in network's environment):
// they hold there beside the isolation and open-world policies, which
// leave the Pods they select to them. A policy of a name that is
// Tenantry's own in the host (reservedPolicyName) is not synced, nor is
// any where the translation is off (network nil, or not translating),
// whose copies made before go.
func networkPolicySyncer(network *tenantNetwork) Syncer {
	translated := network != nil && network.translate
	return Syncer{
		Name:             networkPolicySyncerName,
		Object:           func() client.Object { return &networkingv1.NetworkPolicy{} },
		CopyUserMetadata: true,
		Filter:           func(t client.Object) bool { return translated && !reservedPolicyName(t.GetName()) },
		Down: func(t, h client.Object) error {
			spec, _, err := netpol.Translate(t.(*networkingv1.NetworkPolicy).Spec, network.env)
			if err != nil {
				return Refuse("%v", err)
			}
			h.(*networkingv1.NetworkPolicy).Spec = spec
			return nil
		},
	}
}

// setupNetworkPolicyNotice tells each of a tenant's NetworkPolicies, as it
// is made or its spec changes (and once more when the tenant's app
// starts), with a Warning Event, where the host does not enforce it as
// written: a policy that seems to hold and does not is worse than none.
// network is the tenant's network (nil: not isolated by Tenantry).
func setupNetworkPolicyNotice(controllers *tenantControllers, recorder events.EventRecorder, excluded map[string]bool, network *tenantNetwork) error {
	mgr := controllers.mgr
	translated := network != nil && network.translate
	notice := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if excluded[req.Namespace] {
			return reconcile.Result{}, nil
		}
		policy := &networkingv1.NetworkPolicy{} // from the syncer's informer
		if err := mgr.GetClient().Get(ctx, req.NamespacedName, policy); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		var why string
		switch {
		case network == nil:
			why = "this NetworkPolicy is not enforced: Tenantry's isolation of this cluster is off in the host, and with it the translation of its NetworkPolicies"
		case !translated:
			why = "this NetworkPolicy is not enforced: the host's policy for this cluster turns the translation of NetworkPolicies off (hostPolicy.network.translatePolicies). " +
				"Every Pod of this cluster takes traffic from every other Pod of this cluster, and from no other cluster's (the host's isolation policy)"
		default:
			var err error
			if why, err = network.notEnforced(ctx, policy); err != nil {
				return reconcile.Result{}, err
			}
		}
		if why != "" {
			recorder.Eventf(policy, nil, corev1.EventTypeWarning, ReasonNotEnforced, "Sync", "%s", why)
		}
		return reconcile.Result{}, nil
	})
	return controllers.run(mgr.GetLogger(), "networkpolicy-notice", 1, notice,
		controllers.objects(&networkingv1.NetworkPolicy{}, predicate.GenerationChangedPredicate{}))
}

// notEnforced says where the host does not enforce a translated policy
// as written, or "" where it does.
func (n *tenantNetwork) notEnforced(ctx context.Context, policy *networkingv1.NetworkPolicy) (string, error) {
	if reservedPolicyName(policy.Name) {
		return fmt.Sprintf("this NetworkPolicy is not enforced: its name is Tenantry's own in the host (%s, and names that begin %s); give it another", IsolationPolicyName, OpenPolicyPrefix), nil
	}
	var why []string
	_, warnings, err := netpol.Translate(policy.Spec, n.env)
	if err != nil {
		why = append(why, err.Error())
	}
	why = append(why, warnings...)
	open, err := n.openWorld(ctx, policy.Namespace)
	if err != nil {
		return "", err
	}
	if len(open.tooComplex) > 0 {
		why = append(why, fmt.Sprintf("the Pods of this namespace that no NetworkPolicy selects take more than %d label selectors to write, so the namespace stays open for %s, and its NetworkPolicies are not enforced there: select Pods with fewer distinct selectors",
			netpol.MaxComplement, strings.Join(open.tooComplex, " and ")))
	}
	if len(why) == 0 {
		return "", nil
	}
	return "this NetworkPolicy is not enforced as written: " + strings.Join(why, "; "), nil
}
