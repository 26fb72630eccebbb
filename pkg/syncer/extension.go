package syncer

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Lifecycle is what a Syncer does, beyond a plain copy, at the points of a
// tenant object's life where a copy alone does not say enough: the Pod
// syncer's (package pods) keeps a Pod that ran from running twice, reports
// a refusal as a scheduler would, evicts through the host's
// PodDisruptionBudgets and completes deletions in a tenant that has no
// kubelet. A method with nothing particular to do returns false or nil,
// and DeleteHost deletes plainly.
type Lifecycle interface {
	// Created says whether the host copy of tenant was made before, as
	// the tenant object itself shows: a Pod bound to a node was
	// scheduled, and so ran, in the host. Once gone, such a copy is never
	// made again (running a Pod twice is not the syncer's to decide); Lost
	// reports the loss instead, and the patroller leaves it alone.
	Created(tenant client.Object) bool

	// Lost reports on the tenant object, through c, that its host copy,
	// which Created says was made, is gone: a Pod ends Failed, saying why.
	// It runs on every sync of such an object and writes only what
	// changes.
	Lost(ctx context.Context, c client.Client, tenant client.Object) error

	// HostRejected runs each time the host refuses the tenant object's
	// copy, with the host's message, after the framework has given the
	// tenant object a Warning Event (reason ReasonHostRejected) for it:
	// Pods report PodScheduled=False. It writes through c, the tenant's
	// client.
	HostRejected(ctx context.Context, c client.Client, tenant client.Object, message string) error

	// DeleteHost removes the host copy of a tenant object that is being
	// deleted, in place of a plain delete with opts (the copy's UID as
	// precondition, and the tenant's grace period): Pods evicted in the
	// tenant are evicted in the host, where its PodDisruptionBudgets
	// apply. A refusal by the host is told to the tenant and retried with
	// backoff, as for a refused copy. It writes through host, the tenant's
	// host client.
	DeleteHost(ctx context.Context, host client.Client, tenant, hostCopy client.Object, opts ...client.DeleteOption) error

	// FinishDelete runs when a tenant object is being deleted and its host
	// copy is gone: Pods complete their deletion in a tenant that has no
	// kubelet. It writes through c, the tenant's client.
	FinishDelete(ctx context.Context, c client.Client, tenant client.Object) error
}

// Extension adds to a tenant what a syncer's type needs beside the copies
// of its objects: the Pod syncer's virtual nodes, Pods' API access Secrets,
// and the tenant's place in the kubelet API and the DNS server (package
// pods). Setup runs once per tenant, as the syncer starts there (for a
// syncer whose type is not served yet, once it is), and typically adds
// controllers and runnables to the tenant's manager; an error fails the
// tenant's start, or the late syncer's.
type Extension interface {
	Setup(scope *TenantScope) error
}

// TenantScope is what an Extension gets of one tenant's syncing: the
// tenant's manager, its host client, the hub's view of the host, and the
// framework's rules for names, ownership, controllers, metrics and retries,
// so that what an extension adds behaves as the syncers do.
type TenantScope struct {
	cluster    string
	mgr        manager.Manager
	log        logr.Logger
	hub        *Hub
	host       client.Client
	translator translator
	excluded   map[string]bool
	// controllers runs the tenant's controllers, the extensions' among
	// them.
	controllers *tenantControllers
}

// Cluster is the tenant's name: its VirtualCluster's, the value of
// LabelCluster on its host objects.
func (s *TenantScope) Cluster() string { return s.cluster }

// Manager is the tenant cluster's manager: its client, cache, API reader,
// event recorders and config.
func (s *TenantScope) Manager() manager.Manager { return s.mgr }

// Logger carries the key cluster.
func (s *TenantScope) Logger() logr.Logger { return s.log }

// HostClient writes to the host for this tenant: its requests wait for the
// tenant's turn in the hub's host budget, and, on sharded replicas, for
// the tenant's fence. Read through HostReader.
func (s *TenantScope) HostClient() client.Client { return s.host }

// HostReader reads, from the hub's cache shared by every tenant, the host
// objects Tenantry manages (of the types the hub watches) and every host
// node, whole: the data of a large ConfigMap or Secret, which the cache
// holds as a digest, is read from the host API server.
func (s *TenantScope) HostReader() client.Reader { return s.hub.Reader() }

// Excluded says whether the tenant's objects in namespace are never
// synced (Options.ExcludeNamespaces).
func (s *TenantScope) Excluded(namespace string) bool { return s.excluded[namespace] }

// HostKey is where the host copy of the tenant's namespaced object key
// lives.
func (s *TenantScope) HostKey(tenant types.NamespacedName) types.NamespacedName {
	return s.translator.hostKey(tenant, false)
}

// TenantKey is the key of the tenant object that host was made for, read
// off its annotations; ok is false when host is not Tenantry's for this
// tenant (see Owns).
func (s *TenantScope) TenantKey(host client.Object) (key types.NamespacedName, ok bool) {
	return s.translator.tenantKey(host)
}

// Owns says whether host is Tenantry's, made for this tenant: only such
// host objects are ever changed or deleted.
func (s *TenantScope) Owns(host client.Object) bool { return s.translator.owns(host) }

// RunController adds to the tenant's manager a controller that runs r for
// the requests of sources, at most workers at once, as the syncers' own
// run: its workers exist only while it has work, so an idle tenant's
// controller holds no goroutine, and it is named after what it does, the
// same in every tenant, so that controller-runtime's reconcile series add
// up over the tenants rather than grow with them. Its sources start, and
// sync, before the tenant counts as started; TenantObjects, HostEvents
// and HostNodes give sources, as does controller-runtime's source.Kind
// over the manager's cache.
func (s *TenantScope) RunController(name string, workers int, r reconcile.Reconciler, sources ...source.TypedSource[reconcile.Request]) error {
	return s.controllers.run(s.log, name, workers, r, sources...)
}

// TenantObjects is a source of requests for the tenant's objects of obj's
// type, from the manager's cache, that every predicate lets through.
func (s *TenantScope) TenantObjects(obj client.Object, predicates ...predicate.Predicate) source.TypedSource[reconcile.Request] {
	return s.controllers.objects(obj, predicates...)
}

// HostEvents is a source of the events of the tenant's host objects of
// obj's type (those labelled with its cluster), from the hub's shared
// informer: each queues the tenant object that key names, if any. The
// objects the host has when the source starts come first.
func (s *TenantScope) HostEvents(obj client.Object, key func(host client.Object) (types.NamespacedName, bool)) source.TypedSource[reconcile.Request] {
	return routed(s.hub, obj, s.cluster, key)
}

// HostNodes is a source of the names of host nodes, as requests for
// cluster-scoped objects: every node when the source starts, and every one
// added, changed or deleted later, less those that want refuses (nil:
// all). Read the nodes through HostReader.
func (s *TenantScope) HostNodes(want func(name string) bool) source.TypedSource[reconcile.Request] {
	return named(s.hub.watchNodes, want)
}

// CountWrite counts one write in tenantry_syncer_writes_total, under the
// tenant's cluster: resource is the plural written (or what the write is
// for), direction "down" (to the host) or "up" (to the tenant), and verb
// such as "create", "update" or "delete".
func (s *TenantScope) CountWrite(resource, direction, verb string) {
	writes.WithLabelValues(s.cluster, resource, direction, verb).Inc()
}

// Transient says why err is a state that passes on its own, to be retried
// quietly after retryAfter (logged at debug level, not returned, so
// without a reconciler error's stack trace): a namespace being deleted, in
// the tenant or the host; an object the cache has not seen yet; a write
// that met a newer object. why is "" for any other error.
func (s *TenantScope) Transient(err error) (why string, retryAfter time.Duration) {
	why = retried(err)
	if why == "" && apierrors.IsConflict(err) {
		why = "the object changed meanwhile"
	}
	if why == "" {
		return "", 0
	}
	return why, transientRetry
}
