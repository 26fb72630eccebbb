package syncer

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// hostEvents is the source of a tenant's host events for one syncer: the
// hub routes the events of host copies labelled with this cluster here, and
// each queues its tenant object.
func hostEvents(hub *Hub, s *Syncer, tr Translator) func(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		cancel, err := hub.Route(ctx, s.Object(), tr.Cluster, func(host client.Object) {
			if key, ok := tenantKeyOf(tr, s, host); ok {
				q.Add(reconcile.Request{NamespacedName: key})
			}
		})
		if err != nil {
			return err
		}
		context.AfterFunc(ctx, cancel)
		return nil
	}
}

// tenantKeyOf is the key of the tenant object that host copies for syncer
// s; ok is false for a host object that is not one of s's copies for this
// cluster, such as a Pod's API access Secret, which is labelled for the
// Pod it serves but copies no Secret.
func tenantKeyOf(tr Translator, s *Syncer, host client.Object) (key types.NamespacedName, ok bool) {
	key, ok = tr.TenantKey(host)
	if !ok || tr.HostKey(key, s.ClusterScoped) != client.ObjectKeyFromObject(host) {
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
