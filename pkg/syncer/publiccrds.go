package syncer

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// LabelPublicCRD marks a host CustomResourceDefinition as public: Tenantry
// copies it into every tenant cluster.
const LabelPublicCRD = "tenancy.x-k8s.io/super.public"

// publicCRDs copies the host's public CRDs into one tenant: when the tenant
// spawns, when a CRD becomes public, and whenever a public CRD changes. The
// host is the source of truth: a tenant's edit of a copy is reverted, a
// deleted copy is recreated.
//
// A CRD that stops being public (its label removed, or deleted in the host)
// is no longer synced, and its tenant copy stays: deleting a CRD deletes
// every custom resource of its type, so removing it would destroy tenants'
// data over a label change. Tenants keep their objects; a cluster admin
// removes the copy when that is what they want.
type publicCRDs struct {
	cluster  string
	tenant   client.Client
	hostRead client.Reader
	recorder events.EventRecorder
}

func setupPublicCRDs(controllers *tenantControllers, cluster string, hub *Hub) error {
	mgr := controllers.mgr
	r := &publicCRDs{cluster: cluster, tenant: mgr.GetClient(), hostRead: hub.Reader(), recorder: mgr.GetEventRecorder("tenantry-syncer")}
	return controllers.run(mgr.GetLogger(), "public-crds", 1, r,
		controllers.objects(&apiextensionsv1.CustomResourceDefinition{}, predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[LabelManagedBy] == ManagedByValue
		})),
		named(hub.watchPublicCRDs, nil))
}

func (r *publicCRDs) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("crd", req.Name)
	var host apiextensionsv1.CustomResourceDefinition
	if err := r.hostRead.Get(ctx, req.NamespacedName, &host); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil // not (or no longer) public: the tenant copy stays
		}
		return reconcile.Result{}, fmt.Errorf("reading host CRD %s: %w", req.Name, err)
	}
	if !host.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}

	var tenant apiextensionsv1.CustomResourceDefinition
	err := r.tenant.Get(ctx, req.NamespacedName, &tenant)
	switch {
	case apierrors.IsNotFound(err):
		copied := r.tenantCopy(&host, nil)
		if err := r.tenant.Create(ctx, copied); err != nil {
			return reconcile.Result{}, fmt.Errorf("creating tenant CRD %s: %w", req.Name, err)
		}
		writes.WithLabelValues(r.cluster, "customresourcedefinitions", "up", "create").Inc()
		log.Info("copied public CRD into tenant")
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading tenant CRD %s: %w", req.Name, err)
	}

	if tenant.Labels[LabelManagedBy] != ManagedByValue {
		// The tenant defined this CRD itself: never overwrite it.
		conflicts.WithLabelValues(r.cluster, "customresourcedefinitions", "not-owned").Inc()
		msg := fmt.Sprintf("public host CRD %s is not copied: the tenant has its own CRD of that name", req.Name)
		log.Info(msg)
		r.recorder.Eventf(&tenant, nil, corev1.EventTypeWarning, "PublicCRDConflict", "Sync", "%s", msg)
		return reconcile.Result{RequeueAfter: foreignRetry}, nil
	}
	desired := r.tenantCopy(&host, &tenant)
	if semanticallyEqual(&tenant, desired) {
		return reconcile.Result{}, nil
	}
	if err := r.tenant.Update(ctx, desired); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("updating tenant CRD %s: %w", req.Name, err)
	}
	writes.WithLabelValues(r.cluster, "customresourcedefinitions", "up", "update").Inc()
	log.Info("updated public CRD in tenant")
	return reconcile.Result{}, nil
}

// tenantCopy is the tenant's copy of a host CRD, built on current (nil to
// create). Conversion webhooks are dropped: they are host Services, which a
// tenant API server cannot reach.
func (r *publicCRDs) tenantCopy(host, current *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{}
	if current != nil {
		c = current.DeepCopy()
	}
	c.Name = host.Name
	labels := maps.Clone(c.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, host.Labels)
	labels[LabelManagedBy] = ManagedByValue
	labels[LabelCluster] = r.cluster
	c.Labels = labels
	spec := *host.Spec.DeepCopy()
	if spec.Conversion != nil && spec.Conversion.Strategy == apiextensionsv1.WebhookConverter {
		spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	}
	if current != nil && c.Spec.Conversion != nil && spec.Conversion == nil {
		spec.Conversion = c.Spec.Conversion // the API server's default
	}
	c.Spec = spec
	return c
}
