// Command deploymentcopy copies every Deployment of each tenant cluster into
// the host, and deletes a copy when its original goes: cross-cluster garbage
// collection, which owner references cannot do.
package main

import (
	"context"
	"fmt"

	"go.uber.org/fx"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/examples/internal/devclusters"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// LabelOrigin names the cluster a copy came from.
const LabelOrigin = "deploymentcopy.tenantry.dev/origin"

// CopiesNamespace is the host namespace that holds the copies, each named
// "<cluster>.<namespace>.<name>".
const CopiesNamespace = "deployment-copies"

// Copier reconciles one source cluster's Deployments into the target.
type Copier struct {
	Cluster string
	Source  client.Client // the tenant cluster
	Target  client.Client // the host
}

// Reconcile makes the copy match the original, or deletes it when the
// original is gone. Copies carry the origin label, so that only copies are
// ever deleted.
func (c *Copier) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	copied := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
		Namespace: CopiesNamespace,
		Name:      c.Cluster + "." + req.Namespace + "." + req.Name,
	}}
	var original appsv1.Deployment
	if err := c.Source.Get(ctx, req.NamespacedName, &original); apierrors.IsNotFound(err) {
		var existing appsv1.Deployment
		if err := c.Target.Get(ctx, client.ObjectKeyFromObject(copied), &existing); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if existing.Labels[LabelOrigin] != c.Cluster {
			return reconcile.Result{}, nil // not our copy
		}
		return reconcile.Result{}, client.IgnoreNotFound(c.Target.Delete(ctx, &existing))
	} else if err != nil {
		return reconcile.Result{}, err
	}

	if err := c.Target.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CopiesNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, fmt.Errorf("creating namespace %s: %w", CopiesNamespace, err)
	}
	_, err := controllerutil.CreateOrUpdate(ctx, c.Target, copied, func() error {
		if copied.Labels == nil {
			copied.Labels = map[string]string{}
		}
		copied.Labels[LabelOrigin] = c.Cluster
		copied.Spec = original.Spec
		return nil
	})
	return reconcile.Result{}, err
}

// Module runs a Copier in every cluster it is spawned for, copying into the
// management cluster (the "manage-client").
var Module = fx.Module("deploymentcopy", fx.Invoke(func(t clusterregistry.Tenant) error {
	return builder.ControllerManagedBy(t.Manager).
		Named(t.ClusterName + "-deploymentcopy").
		For(&appsv1.Deployment{}).
		Complete(&Copier{Cluster: t.ClusterName, Source: t.Client, Target: t.ManageClient})
}))

func main() { devclusters.Main(Module) }
