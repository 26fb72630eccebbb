package syncer

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer/internal/hostcache"
	"github.com/tenantry/tenantry/pkg/syncer/internal/quota"
)

// Syncer declares how one resource type syncs between a tenant cluster and
// the host: what goes down, what comes up. It is declared once and runs for
// every tenant; the framework owns everything else (names, namespaces,
// labels, ownership, deletion, conflicts, drift).
//
// A syncer works for any type: Object returns a typed object such as
// &corev1.ConfigMap{}, or an *unstructured.Unstructured with its apiVersion
// and kind set.
type Syncer struct {
	// Name identifies the syncer in logs, metrics and flags: the resource's
	// plural, such as "configmaps".
	Name string

	// Object returns a new, empty object of the type.
	Object func() client.Object

	// ClusterScoped is set for cluster-scoped types; their host copy is
	// named after the host namespace of the tenant object's name (as for
	// Namespaces).
	ClusterScoped bool

	// Filter, if set, says which tenant objects to sync. A tenant object it
	// refuses is not copied, and a host copy Tenantry made of it before
	// (when the filter, or the object, said otherwise) is deleted, as the
	// copy of a deleted object would be. The tenant object itself is left
	// alone; host objects that are not Tenantry's copies are never touched.
	Filter func(tenant client.Object) bool

	// Down sets the host copy's content from the tenant object: spec, data,
	// anything but metadata. host is a new object when the copy is created
	// (its resourceVersion is empty), and a copy of the current host object
	// otherwise: Down sets what it syncs and leaves the rest, so that what the
	// host fills in (defaults, allocations) stays. The framework has already
	// set the host copy's name, namespace, labels and annotations.
	Down func(tenant, host client.Object) error

	// Prefer, if set, asks the host, in desired (the copy about to be
	// created or updated, as Down made it), for what the tenant object
	// already holds where the host would otherwise allocate itself (a
	// Service's cluster IP), and returns the field paths it set (none: it
	// asked for nothing). If the host refuses desired as invalid for one
	// of those fields (or for none named), the write is tried once more as
	// Down made it. What Prefer sets is no part of what the copy must keep
	// holding (AnnotationSyncedDigest), and must not change what a budget
	// counts.
	Prefer func(tenant, desired client.Object) (fields []string)

	// Up brings what the host filled in back to the tenant object: status,
	// and fields such as a Service's cluster IP. It writes through c, the
	// tenant's client, and reports whether it changed anything. Nil: nothing
	// comes up. StatusUp builds the common case.
	Up func(ctx context.Context, c client.Client, host, tenant client.Object) (changed bool, err error)

	// Stripped, if set, says what Down leaves out of tenant's host copy
	// because the host does not allow it (a priority class, a toleration),
	// in words for the tenant, or "" when nothing. The tenant object gets
	// it as a Normal Event (reason ReasonHostStripped) when its copy is
	// written, once per message.
	Stripped func(tenant client.Object) string

	// Usage, if set, says what a host copy takes of its tenant's budget
	// (Options.Budget), by ResourceQuota's names: a Pod its pods,
	// requests.cpu and the like, a Service its services.nodeports. Every
	// copy also takes one of count/<resource>[.<group>], unless Usage
	// says otherwise (0, for a copy that counts no more, as an ended Pod).
	// An error refuses the copy's write: Refuse, for one the tenant must
	// change. Nil: a copy takes only its count.
	Usage func(ctx context.Context, host client.Object, in UsageInput) (corev1.ResourceList, error)

	// OnlyExisting: the framework never creates host copies of this type;
	// something else does (host namespaces are created on demand, before
	// the first object that goes in them). The syncer keeps existing copies
	// in step and deletes them with their tenant objects.
	OnlyExisting bool

	// CopyUserMetadata copies the tenant object's labels and annotations to
	// the host copy (except tenantry.dev/ ones). Off for objects whose host
	// labels carry meaning for the host itself, such as Namespaces.
	CopyUserMetadata bool

	// DenyUnprefixedAnnotations keeps annotation keys without a prefix
	// (no "/") off host copies, where CopyUserMetadata would copy them:
	// container runtimes act on some of a Pod's (io.kubernetes.cri-o.*,
	// io.katacontainers.*).
	DenyUnprefixedAnnotations bool

	// Lifecycle, if set, takes part in the points of a tenant object's
	// life where a plain copy is not enough: a copy never to be made twice,
	// a refusal to report on the object itself, a deletion of its own (see
	// Lifecycle). Nil: a plain copy.
	Lifecycle Lifecycle

	// Extensions add to every tenant what the type needs beside the copies
	// of its objects, such as the Pod syncer's virtual nodes (package
	// pods). Each runs once per tenant, as the syncer starts there.
	Extensions []Extension
}

// UsageInput is what Syncer.Usage is told beside the host copy.
type UsageInput struct {
	// Writing is set for a copy about to be written, which the host's
	// admission has yet to complete (a Pod's RuntimeClass overhead), and
	// Creating for one about to be created. Otherwise the copy is one the
	// host holds.
	Writing, Creating bool
	// Budget is the tenant's budget: the names it counts.
	Budget corev1.ResourceList
	// LimitRange is the LimitRange of the tenant's host namespaces
	// (Options.LimitRange), whose defaults the host gives a Pod at its
	// admission; nil: none.
	LimitRange *corev1.LimitRangeSpec
	// Host reads the hub's cache of the host.
	Host client.Reader
}

// Validate says what is wrong with a Syncer declaration.
func (s *Syncer) Validate() error {
	switch {
	case s.Name == "":
		return fmt.Errorf("syncer has no Name")
	case s.Object == nil:
		return fmt.Errorf("syncer %s has no Object", s.Name)
	case s.Down == nil:
		return fmt.Errorf("syncer %s has no Down", s.Name)
	case slices.Contains(s.Extensions, nil):
		return fmt.Errorf("syncer %s has a nil Extension", s.Name)
	}
	return nil
}

// gvk is the syncer's type, resolved against scheme (an unstructured
// object brings its own).
func (s *Syncer) gvk(scheme *runtime.Scheme) (schema.GroupVersionKind, error) {
	gvk, err := hostcache.GVKOf(s.Object(), scheme)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("syncer %s: %w", s.Name, err)
	}
	return gvk, nil
}

// lost says whether tenant's host copy, when missing, was made before and
// must not be made again.
func (s *Syncer) lost(tenant client.Object) bool {
	return s.Lifecycle != nil && s.Lifecycle.Created(tenant)
}

// usage is s.Usage for a tenant's budget; nil without one.
func (s *Syncer) usage(budget corev1.ResourceList, limitRange *corev1.LimitRangeSpec, host client.Reader) quota.Usage {
	if s.Usage == nil {
		return nil
	}
	return func(ctx context.Context, obj client.Object, writing, creating bool) (corev1.ResourceList, error) {
		return s.Usage(ctx, obj, UsageInput{Writing: writing, Creating: creating, Budget: budget, LimitRange: limitRange, Host: host})
	}
}

// wants applies Filter.
func (s *Syncer) wants(tenant client.Object) bool {
	return s.Filter == nil || s.Filter(tenant)
}

// StatusUp builds an Up that copies status from host to tenant with
// copyStatus, which reports whether it changed tenant, and writes the
// tenant object's status subresource when it did (the whole object, for a
// type without one, such as a custom resource). The write carries the
// tenant object's resourceVersion: a newer tenant object makes it fail with
// a conflict, and the sync is retried, never blindly overwritten.
func StatusUp(copyStatus func(host, tenant client.Object) bool) func(context.Context, client.Client, client.Object, client.Object) (bool, error) {
	return func(ctx context.Context, c client.Client, host, tenant client.Object) (bool, error) {
		if !copyStatus(host, tenant) {
			return false, nil
		}
		err := c.Status().Update(ctx, tenant)
		if apierrors.IsNotFound(err) {
			// A type without a status subresource: status is part of
			// the object (a gone object is NotFound here too).
			err = c.Update(ctx, tenant)
		}
		if err != nil {
			return false, fmt.Errorf("updating tenant status: %w", err)
		}
		return true, nil
	}
}

// CopyStatus builds, for StatusUp, the common status copy for objects of
// type T: status picks the status field out of an object, and the host's
// replaces the tenant's when the two differ.
func CopyStatus[T client.Object, S any](status func(T) *S) func(host, tenant client.Object) bool {
	return func(h, t client.Object) bool {
		hs, ts := status(h.(T)), status(t.(T))
		if equality.Semantic.DeepEqual(*hs, *ts) {
			return false
		}
		*ts = *hs
		return true
	}
}

// UpAll runs several Ups in turn, each on the tenant object as the one
// before left it, and reports whether any changed it.
func UpAll(ups ...func(context.Context, client.Client, client.Object, client.Object) (bool, error)) func(context.Context, client.Client, client.Object, client.Object) (bool, error) {
	return func(ctx context.Context, c client.Client, host, tenant client.Object) (bool, error) {
		changed := false
		for _, up := range ups {
			ch, err := up(ctx, c, host, tenant)
			if err != nil {
				return changed, err
			}
			changed = changed || ch
		}
		return changed, nil
	}
}

// semanticallyEqual compares objects as the API server would store them.
func semanticallyEqual(a, b client.Object) bool {
	return equality.Semantic.DeepEqual(a, b)
}
