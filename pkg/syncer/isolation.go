package syncer

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// IsolationPolicyName is the NetworkPolicy that Tenantry puts in every host
// namespace: its Pods take traffic only from Pods of the same
// VirtualCluster (every host namespace of it carries its
// tenantry.dev/cluster label) and of the host's own namespaces (ingress
// controllers, monitoring), never from another tenant's. Egress is not
// restricted, so that Pods reach DNS, their tenant API server and the
// outside; another tenant's Pods are kept out by that tenant's own
// isolation policy. Traffic from outside the cluster (NodePort and
// LoadBalancer Services) needs a policy of the host admin's.
const IsolationPolicyName = "tenantry-isolation"

// isolation keeps the isolation NetworkPolicy in each of one tenant's host
// namespaces, restoring it when it is changed or deleted by hand.
type isolation struct {
	translator Translator
	tenant     client.Reader
	hostRead   client.Reader
	host       client.Client
	excluded   map[string]bool
}

func setupIsolation(mgr manager.Manager, hub *Hub, r *isolation) error {
	cluster := r.translator.Cluster
	// A request names a tenant namespace.
	byHostNamespace := func(o client.Object) (types.NamespacedName, bool) {
		key, ok := r.translator.TenantKey(o)
		return types.NamespacedName{Name: key.Name}, ok
	}
	byPolicy := func(o client.Object) (types.NamespacedName, bool) {
		ns, ok := o.GetAnnotations()[AnnotationTenantNamespace]
		return types.NamespacedName{Name: ns}, ok && r.translator.Owns(o) && o.GetName() == IsolationPolicyName
	}
	return builder.ControllerManagedBy(mgr).
		Named(cluster + "-isolation").
		For(&corev1.Namespace{}).
		WatchesRawSource(routed(hub, &corev1.Namespace{}, cluster, byHostNamespace)).
		WatchesRawSource(routed(hub, &networkingv1.NetworkPolicy{}, cluster, byPolicy)).
		Complete(r)
}

func (r *isolation) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if r.excluded[req.Name] {
		return reconcile.Result{}, nil
	}
	hostNS := HostNamespace(r.translator.Cluster, req.Name)
	var ns corev1.Namespace
	if err := r.hostRead.Get(ctx, client.ObjectKey{Name: hostNS}, &ns); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err) // made on demand; its creation brings us back
	}
	if !r.translator.Owns(&ns) || !ns.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	desired := r.policy(hostNS, req.Name)
	var current networkingv1.NetworkPolicy
	err := r.hostRead.Get(ctx, client.ObjectKeyFromObject(desired), &current)
	switch {
	case apierrors.IsNotFound(err):
		err := r.host.Create(ctx, desired)
		if apierrors.IsAlreadyExists(err) {
			// Not in the cache, which sees only Tenantry's: someone else's,
			// or stripped of Tenantry's labels; never written.
			conflicts.WithLabelValues(r.translator.Cluster, "networkpolicies", "not-owned").Inc()
			ctrl.LoggerFrom(ctx).Info("a NetworkPolicy that is not Tenantry's holds the isolation policy's name; it is left alone, and the namespace is not isolated by Tenantry",
				"namespace", hostNS, "name", IsolationPolicyName)
			return reconcile.Result{RequeueAfter: foreignRetry}, nil
		}
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("creating the isolation NetworkPolicy of host namespace %s: %w", hostNS, err)
		}
		writes.WithLabelValues(r.translator.Cluster, "networkpolicies", "down", "create").Inc()
		ctrl.LoggerFrom(ctx).V(1).Info("created the isolation NetworkPolicy", "namespace", hostNS)
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading the isolation NetworkPolicy of host namespace %s: %w", hostNS, err)
	}
	if equality.Semantic.DeepEqual(current.Spec, desired.Spec) && r.translator.Owns(&current) {
		return reconcile.Result{}, nil
	}
	current.Labels, current.Annotations, current.Spec = desired.Labels, desired.Annotations, desired.Spec
	if err := r.host.Update(ctx, &current); err != nil {
		return reconcile.Result{}, fmt.Errorf("restoring the isolation NetworkPolicy of host namespace %s: %w", hostNS, err)
	}
	writes.WithLabelValues(r.translator.Cluster, "networkpolicies", "down", "update").Inc()
	return reconcile.Result{}, nil
}

// policy is the isolation NetworkPolicy of host namespace hostNS, which
// holds tenant namespace tenantNS: all its Pods, ingress from the
// VirtualCluster's host namespaces and from the host's own (ingress
// controllers, monitoring), not from other tenants'.
func (r *isolation) policy(hostNS, tenantNS string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: hostNS, Name: IsolationPolicyName,
			Labels:      map[string]string{LabelManagedBy: ManagedByValue, LabelCluster: r.translator.Cluster},
			Annotations: map[string]string{AnnotationTenantNamespace: tenantNS},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{NamespaceSelector: &metav1.LabelSelector{
						MatchLabels: map[string]string{LabelManagedBy: ManagedByValue, LabelCluster: r.translator.Cluster},
					}},
					{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: LabelManagedBy, Operator: metav1.LabelSelectorOpDoesNotExist},
					}}},
				},
			}},
		},
	}
}
