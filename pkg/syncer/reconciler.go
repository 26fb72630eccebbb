package syncer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/syncer/internal/hostcache"
	"github.com/tenantry/tenantry/pkg/syncer/internal/ondemand"

	"github.com/tenantry/tenantry/pkg/syncer/internal/quota"
)

const (
	// conflictRetry is how soon a sync that met a newer object runs again.
	conflictRetry = 100 * time.Millisecond
	// cacheLagRetry is how soon a sync runs again when the host cache has
	// not yet seen an object the host has.
	cacheLagRetry = 500 * time.Millisecond
	// transientRetry is how soon a sync runs again after a state that
	// passes on its own (see retried).
	transientRetry = 2 * time.Second
	// notYetRetry is how soon a sync that waits for another controller's
	// write (NotYet) runs again: that write is usually milliseconds away.
	notYetRetry = 200 * time.Millisecond
	// foreignRetry is how soon a sync blocked by a host object Tenantry does
	// not own looks again.
	foreignRetry = time.Minute
	// policyPendingRetry is how soon a sync waiting for its host
	// namespace's quota to be in force looks again.
	policyPendingRetry = 200 * time.Millisecond
)

// reconciler syncs one type for one tenant cluster. A request names a
// tenant object; the reconciler makes the host copy match it, removes a copy
// whose tenant object is gone, and brings the host's additions up.
type reconciler struct {
	syncer     *Syncer
	gvk        schema.GroupVersionKind
	budget     *quota.Budget // nil: none
	translator translator
	namespaces *hostNamespaces

	tenant client.Client // the tenant's cached client
	// hostRead is the hub's cache of managed host objects, as it holds
	// them: a large ConfigMap's or Secret's data as a digest.
	hostRead client.Reader
	host     client.Client // this tenant's rate-limited host writer
	recorder events.EventRecorder
	// excluded are tenant namespaces whose objects are never synced.
	excluded map[string]bool

	// drifted holds the keys the patroller found out of sync, until a sync
	// repairs them.
	drifted sync.Map
	// rejections are the copies the host refused, retried with backoff.
	rejections *rejections
	// stripped holds, by tenant key, what the tenant was last told its copy
	// leaves out (Syncer.Stripped), so that it is told once.
	stripped sync.Map
	// echoes are this reconciler's writes whose host events need no sync;
	// nil when every event needs one (a syncer with Up).
	echoes *echoes
	// activity records, for the tenant's SyncReport, what this did.
	activity *activity
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// The tenant's lag: each change timed from its event until its sync
	// ends. Deferred: a reconcile that panics (the controller recovers)
	// ends its change's timing too.
	if at, ok := ondemand.Arrived(ctx); ok {
		defer r.activity.synced(at)
	}
	result, err := r.reconcile(ctx, req)
	if err != nil {
		r.activity.failed(r.syncer.Name, req.NamespacedName, err)
	}
	return result, err
}

func (r *reconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("resource", r.syncer.Name)
	ctx = ctrl.LoggerInto(ctx, log)

	tenant := r.syncer.Object()
	if err := r.tenant.Get(ctx, req.NamespacedName, tenant); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("reading tenant %s %s: %w", r.syncer.Name, req.NamespacedName, err)
		}
		tenant = nil
	}
	if tenant != nil {
		if wait, refused := r.rejections.pending(req.NamespacedName, tenant.GetResourceVersion()); refused {
			return reconcile.Result{RequeueAfter: wait}, nil // the host refused this very object; its retry is not due
		}
	}
	hostKey := r.translator.hostKey(req.NamespacedName, r.syncer.ClusterScoped)
	host := r.syncer.Object()
	if err := r.hostRead.Get(ctx, hostKey, host); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("reading host %s %s: %w", r.syncer.Name, hostKey, err)
		}
		host = nil
	}
	if host != nil {
		if _, digested := hostcache.HeldAsDigest(host); digested {
			// The hub holds its data as a digest: read whole from the
			// host, in the tenant's turn of the host budget.
			if err := r.host.Get(ctx, hostKey, host); err != nil {
				if !apierrors.IsNotFound(err) {
					return reconcile.Result{}, fmt.Errorf("reading host %s %s: %w", r.syncer.Name, hostKey, err)
				}
				host = nil
			}
		}
	}
	if host != nil && r.echoes != nil {
		r.echoes.seen(hostKey, host.GetResourceVersion())
	}
	if host != nil && !r.isCopy(host, req.NamespacedName) {
		// The copy, by its annotations, that lost Tenantry's cluster label
		// (someone took it off): given back, then synced.
		if tenant != nil {
			if relabelled, err := r.restoreLabels(ctx, tenant, host); err != nil || relabelled {
				return reconcile.Result{RequeueAfter: cacheLagRetry}, err
			}
		}
		// Not Tenantry's, Tenantry's for another cluster, or something
		// other than this object's copy (a Pod's API access Secret): not
		// ours to touch.
		return r.foreign(ctx, tenant, hostKey)
	}

	wrote, result, err := r.sync(ctx, req.NamespacedName, tenant, host)
	if err == nil && wrote {
		r.activity.wrote()
	}
	if err == nil {
		r.settleDrift(req.NamespacedName, wrote)
		r.rejections.forget(req.NamespacedName)
		r.tellStripped(req.NamespacedName, tenant, wrote)
	}
	var notYet *notYetError
	if errors.As(err, &notYet) {
		log.V(1).Info("waiting: " + notYet.Error())
		return reconcile.Result{RequeueAfter: notYetRetry}, nil
	}
	if why := retried(err); why != "" {
		log.V(1).Info("retrying: "+why, "error", err.Error())
		return reconcile.Result{RequeueAfter: transientRetry}, nil
	}
	if refusal := hostRejection(err); refusal != nil && tenant != nil {
		return r.hostRejected(ctx, req.NamespacedName, tenant, refusal)
	}
	if apierrors.IsConflict(err) {
		conflicts.WithLabelValues(r.translator.Cluster, r.syncer.Name, "newer-object").Inc()
		log.V(1).Info("conflict with a newer object; retrying", "error", err.Error())
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return result, err
}

// sync does the work of one reconcile and reports whether it wrote to the
// host.
func (r *reconciler) sync(ctx context.Context, key types.NamespacedName, tenant, host client.Object) (bool, reconcile.Result, error) {
	if tenant == nil || !tenant.GetDeletionTimestamp().IsZero() || !r.wants(tenant) {
		if host != nil {
			return true, reconcile.Result{}, r.deleteHost(ctx, tenant, host)
		}
		if tenant != nil && !tenant.GetDeletionTimestamp().IsZero() && r.syncer.Lifecycle != nil {
			if err := r.syncer.Lifecycle.FinishDelete(ctx, r.tenant, tenant); client.IgnoreNotFound(err) != nil {
				return false, reconcile.Result{}, tenantError{fmt.Errorf("finishing deletion of tenant %s %s: %w", r.syncer.Name, key, err)}
			}
			writes.WithLabelValues(r.translator.Cluster, r.syncer.Name, "up", "delete").Inc()
		}
		return false, reconcile.Result{}, nil
	}

	if host != nil && host.GetAnnotations()[AnnotationTenantUID] != string(tenant.GetUID()) {
		// A copy of an earlier tenant object of the same name: replace it,
		// never merge into it. Its deletion event brings us back to create.
		ctrl.LoggerFrom(ctx).Info("replacing a host copy of an earlier tenant object",
			"hostUID", host.GetUID(), "tenantUID", tenant.GetUID())
		return true, reconcile.Result{}, r.deleteHost(ctx, nil, host)
	}

	if host == nil {
		switch {
		case r.syncer.OnlyExisting:
			return false, reconcile.Result{}, nil
		case r.syncer.lost(tenant):
			// Gone from the cache, which sees Tenantry's labels only:
			// gone, or relabelled by hand.
			if relabelled, err := r.relabel(ctx, tenant); err != nil || relabelled {
				return relabelled, reconcile.Result{RequeueAfter: cacheLagRetry}, err
			}
			if err := r.syncer.Lifecycle.Lost(ctx, r.tenant, tenant.DeepCopyObject().(client.Object)); err != nil {
				return false, reconcile.Result{}, tenantError{fmt.Errorf("reporting the loss of the host copy of %s %s: %w", r.syncer.Name, key, err)}
			}
			return false, reconcile.Result{}, nil
		}
		return r.createHost(ctx, tenant)
	}

	desired, err := r.syncer.hostCopy(r.translator, tenant, host)
	if err != nil {
		return false, reconcile.Result{}, err
	}
	wrote := false
	if !semanticallyEqual(host, desired) {
		settle, err := r.budget.Admit(ctx, r.gvk, host, desired)
		if err != nil {
			return false, reconcile.Result{}, err
		}
		// The update carries the host object's resourceVersion: if someone
		// changed it since our cache saw it, it fails and we retry.
		desired, err = r.writePreferred(ctx, tenant, desired, func(o client.Object) error { return r.host.Update(ctx, o) })
		settle(err)
		if err != nil {
			return false, reconcile.Result{}, fmt.Errorf("updating host %s %s: %w", r.syncer.Name, client.ObjectKeyFromObject(desired), err)
		}
		r.wrote(desired)
		writes.WithLabelValues(r.translator.Cluster, r.syncer.Name, "down", "update").Inc()
		ctrl.LoggerFrom(ctx).V(1).Info("updated host copy", "host", client.ObjectKeyFromObject(desired))
		host, wrote = desired, true
	}

	if r.syncer.Up != nil {
		changed, err := r.syncer.Up(ctx, r.tenant, host, tenant.DeepCopyObject().(client.Object))
		if err != nil {
			return wrote, reconcile.Result{}, tenantError{fmt.Errorf("syncing %s %s up: %w", r.syncer.Name, key, err)}
		}
		if changed {
			writes.WithLabelValues(r.translator.Cluster, r.syncer.Name, "up", "update").Inc()
		}
	}
	return wrote, reconcile.Result{}, nil
}

// createHost creates the host copy of tenant, and its namespace first.
func (r *reconciler) createHost(ctx context.Context, tenant client.Object) (bool, reconcile.Result, error) {
	// What the host refuses, by its policy or the tenant's budget, makes
	// no host namespace either.
	desired, err := r.syncer.hostCopy(r.translator, tenant, nil)
	if err != nil {
		return false, reconcile.Result{}, err
	}
	settle, err := r.budget.Admit(ctx, r.gvk, nil, desired)
	if err != nil {
		return false, reconcile.Result{}, err
	}
	if !r.syncer.ClusterScoped {
		err := r.namespaces.ensure(ctx, tenant.GetNamespace())
		if err != nil {
			settle(err)
		}
		if errors.Is(err, errPolicyPending) {
			return false, reconcile.Result{RequeueAfter: policyPendingRetry}, nil
		}
		if err != nil {
			return false, reconcile.Result{}, err
		}
	}
	desired, err = r.writePreferred(ctx, tenant, desired, func(o client.Object) error { return r.host.Create(ctx, o) })
	settle(err)
	switch {
	case apierrors.IsAlreadyExists(err):
		return r.alreadyExists(ctx, tenant, desired)
	case err != nil:
		return false, reconcile.Result{}, fmt.Errorf("creating host %s %s: %w", r.syncer.Name, client.ObjectKeyFromObject(desired), err)
	}
	r.wrote(desired)
	writes.WithLabelValues(r.translator.Cluster, r.syncer.Name, "down", "create").Inc()
	ctrl.LoggerFrom(ctx).V(1).Info("created host copy", "host", client.ObjectKeyFromObject(desired))
	return true, reconcile.Result{}, nil
}

// writePreferred writes desired, a host copy of tenant, through write,
// with what the syncer's Prefer asks for; when the host refuses that,
// it writes desired as it was. It returns the object it wrote last.
func (r *reconciler) writePreferred(ctx context.Context, tenant, desired client.Object, write func(client.Object) error) (client.Object, error) {
	if _, digested := hostcache.HeldAsDigest(desired); digested {
		// Built on what the hub's cache holds, not on the host object:
		// written, its data would be lost.
		return desired, fmt.Errorf("refusing to write host %s %s built on a copy whose data the hub holds as a digest", r.syncer.Name, client.ObjectKeyFromObject(desired))
	}
	if r.syncer.Prefer == nil {
		return desired, write(desired)
	}
	preferred := desired.DeepCopyObject().(client.Object)
	fields := r.syncer.Prefer(tenant, preferred)
	if len(fields) == 0 {
		return desired, write(desired)
	}
	err := write(preferred)
	if !refusedFor(err, fields) {
		return preferred, err
	}
	ctrl.LoggerFrom(ctx).V(1).Info("the host refused what the copy asked for; leaving it to the host",
		"host", client.ObjectKeyFromObject(desired), "fields", fields, "error", err.Error())
	return desired, write(desired)
}

// refusedFor says whether err is the host refusing an object as invalid
// for one of fields (or for no field it names).
func refusedFor(err error, fields []string) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil || len(status.Status().Details.Causes) == 0 {
		return true
	}
	for _, cause := range status.Status().Details.Causes {
		for _, f := range fields {
			if cause.Field == f || strings.HasPrefix(cause.Field, f+"[") || strings.HasPrefix(cause.Field, f+".") {
				return true
			}
		}
	}
	return false
}

// wrote records host, just written, as an echo to skip, if echoes are.
func (r *reconciler) wrote(host client.Object) {
	if r.echoes != nil {
		r.echoes.wrote(host)
	}
}

// alreadyExists handles a create that found an object in the way: ours,
// not yet in the cache (wait for it), or not ours (leave it alone).
func (r *reconciler) alreadyExists(ctx context.Context, tenant, desired client.Object) (bool, reconcile.Result, error) {
	existing := r.syncer.Object()
	if err := r.host.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
		return false, reconcile.Result{}, fmt.Errorf("reading host %s %s: %w", r.syncer.Name, client.ObjectKeyFromObject(desired), client.IgnoreNotFound(err))
	}
	if r.isCopy(existing, client.ObjectKeyFromObject(tenant)) {
		return false, reconcile.Result{RequeueAfter: cacheLagRetry}, nil
	}
	if relabelled, err := r.restoreLabels(ctx, tenant, existing); err != nil || relabelled {
		return relabelled, reconcile.Result{RequeueAfter: cacheLagRetry}, err
	}
	result, err := r.foreign(ctx, tenant, client.ObjectKeyFromObject(desired))
	return false, result, err
}

// relabel reads tenant's host copy from the host itself and gives it back
// Tenantry's labels if someone took them off, which took it out of the
// hub's cache (that sees Tenantry's labels only): it says whether it did.
func (r *reconciler) relabel(ctx context.Context, tenant client.Object) (bool, error) {
	existing := r.syncer.Object()
	key := r.translator.hostKey(client.ObjectKeyFromObject(tenant), r.syncer.ClusterScoped)
	if err := r.host.Get(ctx, key, existing); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading host %s %s: %w", r.syncer.Name, key, err)
	}
	return r.restoreLabels(ctx, tenant, existing)
}

// restoreLabels gives existing, a host object where tenant's copy belongs,
// back Tenantry's labels when it is tenant's copy by its annotations (the
// tenant object's UID among them, which nobody else knows) and lost the
// labels; it says whether it did.
func (r *reconciler) restoreLabels(ctx context.Context, tenant, existing client.Object) (bool, error) {
	a, l := existing.GetAnnotations(), existing.GetLabels()
	if a[AnnotationTenantUID] != string(tenant.GetUID()) || a[AnnotationTenantName] != tenant.GetName() ||
		a[AnnotationTenantNamespace] != tenant.GetNamespace() ||
		(l[LabelManagedBy] == ManagedByValue && l[LabelCluster] == r.translator.Cluster) {
		return false, nil
	}
	if v, ok := l[LabelCluster]; ok && v != r.translator.Cluster {
		return false, nil // another cluster's label: not ours to take
	}
	patch := client.MergeFrom(existing.DeepCopyObject().(client.Object))
	labels := maps.Clone(l)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy], labels[LabelCluster] = ManagedByValue, r.translator.Cluster
	existing.SetLabels(labels)
	if err := r.host.Patch(ctx, existing, patch); err != nil {
		return false, fmt.Errorf("restoring the labels of host %s %s: %w", r.syncer.Name, client.ObjectKeyFromObject(existing), err)
	}
	writes.WithLabelValues(r.translator.Cluster, r.syncer.Name, "down", "update").Inc()
	ctrl.LoggerFrom(ctx).Info("restored Tenantry's labels on the host copy, which someone took off", "host", client.ObjectKeyFromObject(existing))
	return true, nil
}

// foreign reports a host object in the way that Tenantry does not own: it
// is never changed; the tenant object gets a Warning event and the sync
// looks again later.
func (r *reconciler) foreign(ctx context.Context, tenant client.Object, hostKey types.NamespacedName) (reconcile.Result, error) {
	conflicts.WithLabelValues(r.translator.Cluster, r.syncer.Name, "not-owned").Inc()
	msg := fmt.Sprintf("host object %s exists and is not this object's copy (not Tenantry's, another cluster's, or made for something else); it is left alone", hostKey)
	ctrl.LoggerFrom(ctx).Info("cannot sync: "+msg, "host", hostKey)
	if tenant != nil {
		r.recorder.Eventf(tenant, nil, corev1.EventTypeWarning, "HostConflict", "Sync", "%s", msg)
	}
	return reconcile.Result{RequeueAfter: foreignRetry}, nil
}

// deleteHost deletes Tenantry's host copy, precisely the object read (by
// UID), so that a newer object of the same name is never deleted by
// mistake. A tenant object being deleted lends its grace period.
func (r *reconciler) deleteHost(ctx context.Context, tenant, host client.Object) error {
	opts := []client.DeleteOption{
		client.Preconditions{UID: ptr.To(host.GetUID())},
		client.PropagationPolicy("Background"),
	}
	if tenant != nil && tenant.GetDeletionGracePeriodSeconds() != nil {
		opts = append(opts, client.GracePeriodSeconds(*tenant.GetDeletionGracePeriodSeconds()))
	}
	var err error
	if tenant != nil && !tenant.GetDeletionTimestamp().IsZero() && r.syncer.Lifecycle != nil {
		err = r.syncer.Lifecycle.DeleteHost(ctx, r.host, tenant, host, opts...)
	} else {
		err = r.host.Delete(ctx, host, opts...)
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or (the UID precondition failed) replaced by a newer object
	}
	if err != nil {
		return fmt.Errorf("deleting host %s %s: %w", r.syncer.Name, client.ObjectKeyFromObject(host), err)
	}
	writes.WithLabelValues(r.translator.Cluster, r.syncer.Name, "down", "delete").Inc()
	ctrl.LoggerFrom(ctx).V(1).Info("deleted host copy", "host", client.ObjectKeyFromObject(host))
	return nil
}

// isCopy says whether host is the copy, made for this cluster, of the
// tenant object key (or of an earlier object of that name).
func (r *reconciler) isCopy(host client.Object, key types.NamespacedName) bool {
	k, ok := tenantKeyOf(r.translator, r.syncer, host)
	return ok && k == key
}

// wants says whether tenant is synced at all: the syncer's filter, and no
// excluded namespace.
func (r *reconciler) wants(tenant client.Object) bool {
	return !r.excluded[namespaceOf(r.syncer, tenant)] && r.syncer.wants(tenant)
}

// tellStripped gives tenant, whose copy was just written, a Normal Event
// saying what the copy leaves out, when that is news; a tenant object that
// is gone is forgotten.
func (r *reconciler) tellStripped(key types.NamespacedName, tenant client.Object, wrote bool) {
	if r.syncer.Stripped == nil {
		return
	}
	if tenant == nil || !tenant.GetDeletionTimestamp().IsZero() {
		r.stripped.Delete(key)
		return
	}
	if !wrote {
		return
	}
	note := r.syncer.Stripped(tenant)
	if note == "" {
		r.stripped.Delete(key)
		return
	}
	if last, told := r.stripped.Swap(key, note); told && last == note {
		return
	}
	r.recorder.Eventf(tenant, nil, corev1.EventTypeNormal, ReasonHostStripped, "Sync", "the host copy leaves out what the host does not allow: %s", note)
}

// settleDrift counts a repair of a key the patroller flagged.
func (r *reconciler) settleDrift(key types.NamespacedName, wrote bool) {
	if _, flagged := r.drifted.LoadAndDelete(key); flagged && wrote {
		driftRepaired.WithLabelValues(r.translator.Cluster, r.syncer.Name).Inc()
	}
}

// NotYet is the error of an Up or Down step that waits for a state another
// controller brings about (a Pod's status waits for its virtual node): the
// sync runs again a moment later, quietly (logged at debug level), rather
// than failing with a reconciler error.
func NotYet(format string, args ...any) error {
	return &notYetError{msg: fmt.Sprintf(format, args...)}
}

type notYetError struct{ msg string }

func (e *notYetError) Error() string { return e.msg }

// retried says why err is a state that is expected and passes on its own,
// to retry quietly (at debug level, without the stack trace of a
// reconciler error): a namespace being deleted, in the tenant (a binding
// or status write of a Pod in it) or in the host, or an object that the
// cache has not seen yet. "" for any other error.
func retried(err error) string {
	switch {
	case err == nil:
		return ""
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return "the namespace is being deleted"
	case apierrors.IsAlreadyExists(err):
		return "the object exists, and the cache has not seen it yet"
	}
	return ""
}
