package syncer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// pendingRetry is how soon a pending syncer whose CRD exists looks again
// for its type to be served.
const pendingRetry = time.Second

// pendingSyncers holds the syncers of types that a tenant (or the host)
// does not serve yet, typically custom resources whose CRD has not arrived,
// and starts each as soon as its CRD is established in the tenant and the
// host serves the type: no restart needed. Starting a controller for an
// unknown type would fail the whole tenant manager instead.
type pendingSyncers struct {
	log          logr.Logger
	tenantMapper meta.RESTMapper
	hub          *Hub
	start        func(*Syncer, schema.GroupVersionKind) error

	mu      sync.Mutex
	waiting map[schema.GroupKind]pendingSyncer
}

type pendingSyncer struct {
	syncer *Syncer
	gvk    schema.GroupVersionKind
}

func (p *pendingSyncers) add(s *Syncer, gvk schema.GroupVersionKind) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting == nil {
		p.waiting = map[schema.GroupKind]pendingSyncer{}
	}
	p.waiting[gvk.GroupKind()] = pendingSyncer{syncer: s, gvk: gvk}
	p.log.Info("syncer waits for its type to be served", "resource", s.Name, "gvk", gvk.String())
}

// ready says whether both the tenant and the host serve gvk.
func (p *pendingSyncers) ready(gvk schema.GroupVersionKind) (bool, error) {
	tenant, err := serves(p.tenantMapper, gvk)
	if err != nil || !tenant {
		return false, err
	}
	return p.hub.Serves(gvk)
}

// setup watches the tenant's CRDs for the pending syncers' types.
func (p *pendingSyncers) setup(mgr manager.Manager, cluster string) error {
	p.mu.Lock()
	none := len(p.waiting) == 0
	p.mu.Unlock()
	if none {
		return nil
	}
	return tenantController(mgr, "pending-syncers", controller.Options{}).
		For(&apiextensionsv1.CustomResourceDefinition{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := mgr.GetClient().Get(ctx, req.NamespacedName, &crd); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			return p.crdChanged(&crd)
		}))
}

// crdChanged starts the pending syncer of crd's kind once the type is
// served.
func (p *pendingSyncers) crdChanged(crd *apiextensionsv1.CustomResourceDefinition) (reconcile.Result, error) {
	gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
	p.mu.Lock()
	w, ok := p.waiting[gk]
	p.mu.Unlock()
	if !ok || !established(crd) {
		return reconcile.Result{}, nil
	}
	ready, err := p.ready(w.gvk)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !ready {
		return reconcile.Result{RequeueAfter: pendingRetry}, nil
	}
	if err := p.start(w.syncer, w.gvk); err != nil {
		return reconcile.Result{}, fmt.Errorf("starting syncer %s: %w", w.syncer.Name, err)
	}
	p.mu.Lock()
	delete(p.waiting, gk)
	p.mu.Unlock()
	p.log.Info("syncer started: its type is now served", "resource", w.syncer.Name, "gvk", w.gvk.String())
	return reconcile.Result{}, nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
