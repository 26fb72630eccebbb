// Command podghost keeps a PodGhost custom resource in the host for every
// Pod of every tenant cluster: a custom resource written from another
// cluster's events, without a Go type (unstructured).
package main

import (
	"context"
	"fmt"

	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/examples/internal/devclusters"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// GhostsNamespace is the host namespace of the PodGhosts, each named
// "<cluster>.<namespace>.<pod>".
const GhostsNamespace = "pod-ghosts"

// PodGhostGVK is the PodGhost type (crd.yaml).
var PodGhostGVK = schema.GroupVersionKind{Group: "samples.tenantry.dev", Version: "v1alpha1", Kind: "PodGhost"}

func newGhost(name string) *unstructured.Unstructured {
	g := &unstructured.Unstructured{}
	g.SetGroupVersionKind(PodGhostGVK)
	g.SetNamespace(GhostsNamespace)
	g.SetName(name)
	return g
}

// Haunter keeps one tenant's PodGhosts.
type Haunter struct {
	Cluster string
	Tenant  client.Client
	Host    client.Client
}

// Reconcile writes the Pod's ghost, or removes it with the Pod.
func (h *Haunter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ghost := newGhost(h.Cluster + "." + req.Namespace + "." + req.Name)
	var pod corev1.Pod
	if err := h.Tenant.Get(ctx, req.NamespacedName, &pod); apierrors.IsNotFound(err) {
		return reconcile.Result{}, client.IgnoreNotFound(h.Host.Delete(ctx, ghost))
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if err := h.Host.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: GhostsNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, fmt.Errorf("creating namespace %s: %w", GhostsNamespace, err)
	}
	_, err := controllerutil.CreateOrUpdate(ctx, h.Host, ghost, func() error {
		return unstructured.SetNestedStringMap(ghost.Object, map[string]string{
			"cluster": h.Cluster, "namespace": pod.Namespace, "pod": pod.Name, "phase": string(pod.Status.Phase),
		}, "spec")
	})
	return reconcile.Result{}, err
}

// Module runs a Haunter in every cluster it is spawned for.
var Module = fx.Module("podghost", fx.Invoke(func(t clusterregistry.Tenant) error {
	return builder.ControllerManagedBy(t.Manager).
		Named(t.ClusterName + "-podghost").
		For(&corev1.Pod{}).
		Complete(&Haunter{Cluster: t.ClusterName, Tenant: t.Client, Host: t.ManageClient})
}))

func main() { devclusters.Main(Module) }
