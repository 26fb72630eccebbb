package syncer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tenantry/tenantry/pkg/syncer/internal/hostcache"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// patroller compares, every period, one type's tenant objects with their
// host copies and queues what differs: a host copy deleted or edited by
// hand, an orphaned copy, anything a missed event left behind. It only
// reads; the reconciler repairs.
type patroller struct {
	r      *reconciler
	period time.Duration
	gvk    schema.GroupVersionKind
	scheme *runtime.Scheme
}

// start is a source.TypedFunc: it patrols until ctx ends, first at a
// random point of the period, so that tenants started together (after a
// restart) do not all patrol at once.
func (p *patroller) start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	// A timer, not a goroutine that waits for one: a tenant has a patroller
	// per synced type, and an idle tenant should hold no goroutine for
	// them.
	var (
		mu      sync.Mutex
		stopped bool
		next    *time.Timer
	)
	patrol := func() {
		if err := p.round(ctx, q); err != nil && ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).Error(err, "patrol round failed", "resource", p.r.syncer.Name)
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			next.Reset(p.period)
		}
	}
	mu.Lock()
	next = time.AfterFunc(rand.N(p.period), patrol)
	mu.Unlock()
	context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		next.Stop()
	})
	return nil
}

// round compares everything once and queues each key found out of sync.
func (p *patroller) round(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s, tr := p.r.syncer, p.r.translator
	tenants := hostcache.NewList(s.Object(), p.gvk, p.scheme)
	if err := p.r.tenant.List(ctx, tenants); err != nil {
		return fmt.Errorf("listing tenant %s: %w", s.Name, err)
	}
	hosts := hostcache.NewList(s.Object(), p.gvk, p.scheme)
	if err := p.r.hostRead.List(ctx, hosts, client.MatchingFields{hostcache.ClusterIndex: tr.Cluster}); err != nil {
		return fmt.Errorf("listing host %s: %w", s.Name, err)
	}

	byKey := map[types.NamespacedName]client.Object{}
	if err := meta.EachListItem(hosts, func(o runtime.Object) error {
		h := o.(client.Object)
		byKey[client.ObjectKeyFromObject(h)] = h
		return nil
	}); err != nil {
		return err
	}
	flag := func(key types.NamespacedName) {
		driftFound.WithLabelValues(tr.Cluster, s.Name).Inc()
		p.r.drifted.Store(key, true)
		q.Add(reconcile.Request{NamespacedName: key})
	}
	err := meta.EachListItem(tenants, func(o runtime.Object) error {
		t := o.(client.Object)
		key := client.ObjectKeyFromObject(t)
		hostKey := tr.hostKey(key, s.ClusterScoped)
		h, found := byKey[hostKey]
		delete(byKey, hostKey)
		if p.drifted(t, h, found) {
			flag(key)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, h := range byKey { // host copies with no tenant object
		if key, ok := tenantKeyOf(tr, s, h); ok {
			flag(key)
		}
	}
	return nil
}

// drifted says whether tenant object t and its host copy h (if found)
// differ in a way a sync would change.
func (p *patroller) drifted(t, h client.Object, found bool) bool {
	s := p.r.syncer
	if !t.GetDeletionTimestamp().IsZero() || !p.r.wants(t) {
		return found
	}
	if !found {
		return !s.OnlyExisting && !s.lost(t) // a lost copy is reported on its deletion's event and at start
	}
	if h.GetAnnotations()[AnnotationTenantUID] != string(t.GetUID()) {
		return true
	}
	desired, err := s.hostCopy(p.r.translator, t, h)
	if err != nil {
		return true
	}
	if _, digested := hostcache.HeldAsDigest(h); digested {
		// h's data is its digest: compared as the cache would hold desired.
		desired = hostcache.AsHeld(desired)
	}
	return !semanticallyEqual(h, desired)
}
