package syncer

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// echoes remembers, by host key, the resourceVersion of each host copy a
// reconcile just wrote, so that the hub's event of that very write, its
// echo, queues nothing: the reconcile that wrote the copy already made it
// match its tenant object, and a second one would read both objects,
// translate and compare them only to find nothing to do (half of the
// reconciles of a type without Up, such as ConfigMaps).
//
// Only a syncer without Up skips echoes: an Up brings what the host fills
// in (a Service's cluster IP) to the tenant, from the event.
//
// An entry lasts until the next event of its key, echo or not, or until a
// reconcile reads that version from the cache (the echo came before the
// write returned, and queued its reconcile as any event).
type echoes struct {
	versions sync.Map // types.NamespacedName -> resourceVersion
}

// wrote records that host, as the host API server returned it, was just
// written.
func (e *echoes) wrote(host client.Object) {
	e.versions.Store(client.ObjectKeyFromObject(host), host.GetResourceVersion())
}

// echo says whether the event of host is the echo of a write recorded with
// wrote, and forgets the write either way.
func (e *echoes) echo(host client.Object) bool {
	rv, ok := e.versions.LoadAndDelete(client.ObjectKeyFromObject(host))
	return ok && rv == host.GetResourceVersion()
}

// seen forgets the write of key once a reconcile read its version.
func (e *echoes) seen(key types.NamespacedName, resourceVersion string) {
	e.versions.CompareAndDelete(key, resourceVersion)
}
