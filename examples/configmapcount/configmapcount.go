// Package configmapcount is a multicluster-runtime controller, written as
// multicluster-runtime's own examples are, run over Tenantry's tenants by
// the mcprovider: it counts every tenant's ConfigMaps into a ConfigMap of
// the host, one per tenant, named after it, in namespace Namespace:
//
//	$ kubectl -n tenant-configmap-counts get configmap tenant-1 -o jsonpath='{.data.configmaps}'
//	3
//
// Module runs it in Tenantry's controller-manager (`tenantry dev
// --example-configmap-count` does); cmd/configmapcount runs it in a main
// of its own.
package configmapcount

import (
	"context"
	"fmt"
	"strconv"

	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

const (
	// Namespace is the host namespace of the counts.
	Namespace = "tenant-configmap-counts"
	// CountKey is the key of a count's data that holds the number.
	CountKey = "configmaps"
	// LabelCluster names, on a count, the tenant it counts.
	LabelCluster = "configmapcount.tenantry.dev/cluster"

	fieldOwner = "configmapcount"
)

// Module registers the controller with the management app's
// multicluster-runtime manager, which runs it over every tenant of the
// replica.
var Module = fx.Module("configmapcount", fx.Invoke(func(mgr mcmanager.Manager) error {
	return Setup(mgr, Namespace)
}))

// Setup registers the controller with mgr: every ConfigMap event of an
// engaged cluster recounts that cluster's ConfigMaps into the host's
// ConfigMap of the cluster's name in namespace.
func Setup(mgr mcmanager.Manager, namespace string) error {
	c := &counter{mgr: mgr, namespace: namespace}
	return mcbuilder.ControllerManagedBy(mgr).
		Named("configmap-count").
		For(&corev1.ConfigMap{}).
		Complete(mcreconcile.Func(c.Reconcile))
}

type counter struct {
	mgr       mcmanager.Manager
	namespace string
}

// Reconcile counts the request's cluster's ConfigMaps, from its cache, and
// applies the count to the host.
func (c *counter) Reconcile(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	cl, err := c.mgr.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return ctrl.Result{}, err
	}
	var cms corev1.ConfigMapList
	if err := cl.GetClient().List(ctx, &cms); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the ConfigMaps of cluster %q: %w", req.ClusterName, err)
	}
	count := corev1ac.ConfigMap(req.ClusterName.String(), c.namespace).
		WithLabels(map[string]string{LabelCluster: req.ClusterName.String()}).
		WithData(map[string]string{CountKey: strconv.Itoa(len(cms.Items))})
	host := c.mgr.GetLocalManager().GetClient()
	err = host.Apply(ctx, count, client.FieldOwner(fieldOwner), client.ForceOwnership)
	if apierrors.IsNotFound(err) { // the namespace, the first time
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace}}
		if err := host.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, fmt.Errorf("creating namespace %q: %w", c.namespace, err)
		}
		err = host.Apply(ctx, count, client.FieldOwner(fieldOwner), client.ForceOwnership)
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("applying the count of cluster %q: %w", req.ClusterName, err)
	}
	return ctrl.Result{}, nil
}
