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
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// pendingRetry is how soon a pending syncer whose CRD the tenant has looks
// again for the host to serve its type, the first time; each further look
// waits twice as long, up to pendingRetryMax. A public host CRD that
// changes wakes it at once.
const (
	pendingRetry    = time.Second
	pendingRetryMax = 5 * time.Minute
)

// pendingDelay is how long to wait before look number attempt (from 0).
func pendingDelay(attempt int) time.Duration {
	if attempt >= 16 {
		return pendingRetryMax
	}
	return min(pendingRetry<<attempt, pendingRetryMax)
}

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
	// looks counts, by kind, the looks that found the host not serving it.
	looks map[schema.GroupKind]int
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
	return serves(p.hub.cache.Mapper(), gvk)
}

// setup watches the tenant's CRDs for the pending syncers' types.
func (p *pendingSyncers) setup(controllers *tenantControllers) error {
	mgr := controllers.mgr
	p.mu.Lock()
	none := len(p.waiting) == 0
	p.mu.Unlock()
	if none {
		return nil
	}
	changed := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := mgr.GetClient().Get(ctx, req.NamespacedName, &crd); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		return p.crdChanged(&crd)
	})
	return controllers.run(mgr.GetLogger(), "pending-syncers", 1, changed,
		controllers.objects(&apiextensionsv1.CustomResourceDefinition{}),
		// A public host CRD, of the same name as the tenant's copy of it,
		// may be what the host now serves.
		named(p.hub.watchPublicCRDs, nil))
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
		p.mu.Lock()
		if p.looks == nil {
			p.looks = map[schema.GroupKind]int{}
		}
		delay := pendingDelay(p.looks[gk])
		p.looks[gk]++
		p.mu.Unlock()
		return reconcile.Result{RequeueAfter: delay}, nil
	}
	if err := p.start(w.syncer, w.gvk); err != nil {
		return reconcile.Result{}, fmt.Errorf("starting syncer %s: %w", w.syncer.Name, err)
	}
	p.mu.Lock()
	delete(p.waiting, gk)
	delete(p.looks, gk)
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

// serves says whether mapper knows gvk; an unknown kind is no error.
func serves(mapper meta.RESTMapper, gvk schema.GroupVersionKind) (bool, error) {
	_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking up %s: %w", gvk, err)
	}
	return true, nil
}
