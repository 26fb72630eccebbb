package syncer

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// hubSource is a source of requests fed by a hub subscription: subscribe
// registers, until its cancel is called (when the controller's context
// ends), a handler that queues each request it is given.
func hubSource(subscribe func(ctx context.Context, queue func(reconcile.Request)) (cancel func(), err error)) source.TypedSource[reconcile.Request] {
	return source.TypedFunc[reconcile.Request](func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		cancel, err := subscribe(ctx, q.Add)
		if err != nil {
			return err
		}
		context.AfterFunc(ctx, cancel)
		return nil
	})
}

// routed is a source of the events of host objects of obj's type that
// belong to cluster: each queues the tenant object that key names, if any.
func routed(hub *Hub, obj client.Object, cluster string, key func(host client.Object) (types.NamespacedName, bool)) source.TypedSource[reconcile.Request] {
	return hubSource(func(ctx context.Context, queue func(reconcile.Request)) (func(), error) {
		return hub.cache.Route(ctx, obj, cluster, func(host client.Object) {
			if k, ok := key(host); ok {
				queue(reconcile.Request{NamespacedName: k})
			}
		})
	})
}

// hostEvents is the source of a tenant's host events for one syncer: the
// hub routes the events of host copies labelled with this cluster here, and
// each queues its tenant object, but for the echoes of the syncer's own
// writes (nil: none are skipped).
func hostEvents(hub *Hub, s *Syncer, tr translator, skip *echoes) source.TypedSource[reconcile.Request] {
	return routed(hub, s.Object(), tr.Cluster, func(host client.Object) (types.NamespacedName, bool) {
		if skip != nil && skip.echo(host) {
			return types.NamespacedName{}, false
		}
		return tenantKeyOf(tr, s, host)
	})
}

// named is a source of the names a hub watch (Hub.watchNodes,
// Hub.watchPublicCRDs) tells, as requests for cluster-scoped objects, less
// those that want refuses (nil: all).
func named(watch func(context.Context, func(string)) (func(), error), want func(name string) bool) source.TypedSource[reconcile.Request] {
	return hubSource(func(ctx context.Context, queue func(reconcile.Request)) (func(), error) {
		return watch(ctx, func(name string) {
			if want == nil || want(name) {
				queue(reconcile.Request{NamespacedName: client.ObjectKey{Name: name}})
			}
		})
	})
}

// tenantKeyOf is the key of the tenant object that host copies for syncer
// s; ok is false for a host object that is not one of s's copies for this
// cluster, such as a Pod's API access Secret, which is labelled for the
// Pod it serves but copies no Secret.
func tenantKeyOf(tr translator, s *Syncer, host client.Object) (key types.NamespacedName, ok bool) {
	key, ok = tr.tenantKey(host)
	if !ok || tr.hostKey(key, s.ClusterScoped) != client.ObjectKeyFromObject(host) {
		return types.NamespacedName{}, false
	}
	return key, true
}

// namespaceOf is the tenant namespace an object belongs to; a Namespace
// belongs to itself.
func namespaceOf(s *Syncer, o client.Object) string {
	if s.ClusterScoped {
		return o.GetName()
	}
	return o.GetNamespace()
}
