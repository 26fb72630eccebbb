// Package quota holds one tenant to its host budget (a VirtualCluster's
// spec.hostPolicy.budget): the most it may have in the host over all its
// host namespaces, by ResourceQuota's names. The syncers ask it before
// every write of a host copy (Admit) and before every host namespace they
// make (AdmitNamespace); what each type's copies take is declared by the
// type's syncer (Counted.Usage), not known here.
package quota

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options configure a tenant's Budget.
type Options struct {
	// Limits are the budget: the most of each resource, by ResourceQuota's
	// names (count/<resource>[.<group>] among them).
	Limits corev1.ResourceList
	// Read reads the hub's cache of the host.
	Read client.Reader
	// Copies are the list options that select the tenant's host copies of
	// a counted type in Read, and Namespaces those of its host namespaces.
	Copies, Namespaces []client.ListOption
	// Refuse makes the error of a write the budget has no room for, from
	// the message for the tenant.
	Refuse func(format string, args ...any) error
}

// Usage says what obj, a host copy, takes of the resources a budget may
// name. writing is set for a copy about to be written (not yet through
// the host's admission), creating for one about to be created. An error
// refuses the write.
type Usage func(ctx context.Context, obj client.Object, writing, creating bool) (corev1.ResourceList, error)

// Counted is a synced type that the budget counts.
type Counted struct {
	GVK schema.GroupVersionKind
	// Resource is its plural resource name, which names it in
	// count/<resource>[.<group>].
	Resource string
	// NewList returns an empty list of the type.
	NewList func() client.ObjectList
	// Usage is what a copy takes besides its count; nil: only its count.
	Usage Usage
}

// countName is t's name in count/<resource>[.<group>].
func (t Counted) countName() corev1.ResourceName {
	name := "count/" + t.Resource
	if t.GVK.Group != "" {
		name += "." + t.GVK.Group
	}
	return corev1.ResourceName(name)
}

// ReportPeriod is how often a tenant's budget totals are summed for its
// reporter, which hears of them only when they changed.
const ReportPeriod = 5 * time.Second

// Budget holds one tenant to its budget. Every write of a host copy that
// would add to a resource the budget names asks it first (Admit), under
// one lock per tenant, so that concurrent syncs never take the tenant
// over: what the hub's cache does not show yet, the writes admitted and
// in flight or not yet seen, counts too. A tenant's syncs run in one
// replica at a time (its Lease, with --shard-mode), so the lock is the
// tenant's only writer.
//
// A nil *Budget admits everything.
type Budget struct {
	opts Options

	mu sync.Mutex
	// types are the synced types, by GVK, that the budget counts.
	types map[schema.GroupVersionKind]Counted
	// pending are the writes admitted and not yet seen in the cache: what
	// each adds, and what it replaces.
	pending map[pendingKey]*pendingWrite
}

type pendingKey struct {
	gvk schema.GroupVersionKind
	key types.NamespacedName
}

type pendingWrite struct {
	usage corev1.ResourceList
	// before is the resourceVersion the object had before the write (""
	// for a create): the cache shows the write once it shows another.
	before string
	// done is when the write returned, successfully.
	done time.Time
}

// pendingExpiry is how long a write done is counted while the cache does
// not show it: longer than any cache lag, and short enough that a copy
// deleted before the cache saw it is not counted for long.
const pendingExpiry = 30 * time.Second

// New is a tenant's Budget.
func New(opts Options) *Budget {
	return &Budget{opts: opts, types: map[schema.GroupVersionKind]Counted{}, pending: map[pendingKey]*pendingWrite{}}
}

// Count makes the budget count the copies of t.
func (b *Budget) Count(t Counted) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.types[t.GVK] = t
}

// Admit is asked before current (nil for a create) is written as desired,
// both host objects of type gvk. It refuses (Options.Refuse) a write that
// would take a total over the budget, naming the resource; otherwise it
// counts the write as in flight until settle is called with its outcome.
func (b *Budget) Admit(ctx context.Context, gvk schema.GroupVersionKind, current, desired client.Object) (settle func(err error), err error) {
	noop := func(error) {}
	if b == nil {
		return noop, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, counted := b.types[gvk]
	if !counted {
		return noop, nil
	}
	wants, err := b.usage(ctx, t, desired, true, current == nil)
	if err != nil {
		return nil, err
	}
	adds := maps.Clone(wants)
	before := ""
	if current != nil {
		before = current.GetResourceVersion()
		had, err := b.usage(ctx, t, current, false, false)
		if err != nil {
			return nil, err
		}
		subFrom(adds, had)
	}
	grows := false
	for _, q := range adds {
		grows = grows || q.Sign() > 0
	}
	if !grows {
		return noop, nil // a write that adds nothing is never refused, even over a lowered budget
	}
	key := pendingKey{gvk: gvk, key: client.ObjectKeyFromObject(desired)}
	used, err := b.usedOf(ctx, gvk, key)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(adds)) {
		if add := adds[name]; add.Sign() <= 0 {
			continue
		}
		// used leaves the object out: the write replaces it whole.
		total := used[name]
		total.Add(wants[name])
		if limit := b.opts.Limits[name]; total.Cmp(limit) > 0 {
			return nil, b.noRoom(name, total, limit, quantity(used[name]))
		}
	}
	write := &pendingWrite{usage: wants, before: before}
	b.pending[key] = write
	return func(err error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if err != nil {
			delete(b.pending, key)
			return
		}
		write.done = time.Now()
	}, nil
}

func (b *Budget) noRoom(name corev1.ResourceName, total, limit resource.Quantity, used string) error {
	return b.opts.Refuse("the host budget of this cluster has no room: %s would be %s, over %s (%s used); "+
		"free some, or raise it in the VirtualCluster's spec.hostPolicy.budget", name, total.String(), limit.String(), used)
}

// CountNamespaces is the budget's name of the host namespaces a tenant
// has.
const CountNamespaces corev1.ResourceName = "count/namespaces"

// AdmitNamespace refuses one more host namespace when the budget counts
// CountNamespaces and the tenant has as many as it allows: those in the
// cache, and recent, those it made a moment ago that the cache may not
// show yet. The caller serializes the namespaces it makes.
func (b *Budget) AdmitNamespace(ctx context.Context, recent []string) error {
	if b == nil {
		return nil
	}
	limit, counted := b.opts.Limits[CountNamespaces]
	if !counted {
		return nil
	}
	names, err := b.namespaces(ctx)
	if err != nil {
		return err
	}
	for _, n := range recent {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if total := resource.NewQuantity(int64(len(names)+1), resource.DecimalSI); total.Cmp(limit) > 0 {
		return b.noRoom(CountNamespaces, *total, limit, fmt.Sprint(len(names)))
	}
	return nil
}

// namespaces are the names of the tenant's host namespaces in the cache.
func (b *Budget) namespaces(ctx context.Context) ([]string, error) {
	var list corev1.NamespaceList
	if err := b.opts.Read.List(ctx, &list, b.opts.Namespaces...); err != nil {
		return nil, fmt.Errorf("counting the budget of host namespaces: %w", err)
	}
	names := make([]string, 0, len(list.Items))
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	return names, nil
}

// quantity prints q, "0" for a total that has none.
func quantity(q resource.Quantity) string {
	if q.IsZero() {
		return "0"
	}
	return q.String()
}

// usedOf sums what the tenant has of gvk's resources: its host copies in
// the cache (but the one at skip, whose write is being admitted), and the
// admitted writes the cache does not show yet. b.mu is held.
func (b *Budget) usedOf(ctx context.Context, gvk schema.GroupVersionKind, skip pendingKey) (corev1.ResourceList, error) {
	t := b.types[gvk]
	objs, err := b.list(ctx, t)
	if err != nil {
		return nil, err
	}
	used := corev1.ResourceList{}
	cached := map[types.NamespacedName]client.Object{}
	for _, o := range objs {
		k := client.ObjectKeyFromObject(o)
		cached[k] = o
		if k == skip.key {
			continue
		}
		u, err := b.usage(ctx, t, o, false, false)
		if err != nil {
			return nil, err
		}
		Add(used, u)
	}
	for k, w := range b.pending {
		if k.gvk != gvk {
			continue
		}
		o, seen := cached[k.key]
		if done := !w.done.IsZero(); done && (seen && o.GetResourceVersion() != w.before || time.Since(w.done) > pendingExpiry) {
			delete(b.pending, k) // the cache shows it now, or it went before the cache saw it
			continue
		}
		if k == skip {
			continue
		}
		if seen {
			// The write replaces what the cache shows.
			u, err := b.usage(ctx, t, o, false, false)
			if err != nil {
				return nil, err
			}
			subFrom(used, u)
		}
		Add(used, w.usage)
	}
	return used, nil
}

// list reads the tenant's host copies of t from the cache.
func (b *Budget) list(ctx context.Context, t Counted) ([]client.Object, error) {
	list := t.NewList()
	// Read only: the cache's own objects, not copies of each.
	opts := append(slices.Clone(b.opts.Copies), client.UnsafeDisableDeepCopy)
	if err := b.opts.Read.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("counting the budget of %s: %w", t.GVK.Kind, err)
	}
	var out []client.Object
	err := meta.EachListItem(list, func(o runtime.Object) error {
		if obj, ok := o.(client.Object); ok {
			out = append(out, obj)
		}
		return nil
	})
	return out, err
}

// Used sums every resource the budget names.
func (b *Budget) Used(ctx context.Context) (corev1.ResourceList, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	used := corev1.ResourceList{}
	for gvk := range b.types {
		u, err := b.usedOf(ctx, gvk, pendingKey{})
		if err != nil {
			return nil, err
		}
		Add(used, u)
	}
	if _, counted := b.opts.Limits[CountNamespaces]; counted {
		names, err := b.namespaces(ctx)
		if err != nil {
			return nil, err
		}
		used[CountNamespaces] = *resource.NewQuantity(int64(len(names)), resource.DecimalSI)
	}
	out := corev1.ResourceList{}
	for name := range b.opts.Limits {
		out[name] = used[name] // a resource of none shows 0
		if q := out[name]; q.Format == "" {
			out[name] = *resource.NewQuantity(0, resource.DecimalSI)
		}
	}
	return out, nil
}

// Report tells reporter the totals every ReportPeriod while they change,
// until ctx ends.
func (b *Budget) Report(ctx context.Context, log logr.Logger, reporter func(context.Context, corev1.ResourceList) error) {
	var last corev1.ResourceList
	tick := time.NewTicker(ReportPeriod)
	defer tick.Stop()
	for {
		used, err := b.Used(ctx)
		switch {
		case err != nil:
			log.V(1).Info("cannot sum the budget yet", "error", err.Error())
		case last == nil || !equality.Semantic.DeepEqual(used, last):
			if err := reporter(ctx, used); err != nil {
				log.V(1).Info("cannot report the budget yet", "error", err.Error())
			} else {
				last = used
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// usage is what obj, a host copy of counted type t, takes of the
// resources the budget names: what t's Usage says, and one of its count
// unless Usage says otherwise.
func (b *Budget) usage(ctx context.Context, t Counted, obj client.Object, writing, creating bool) (corev1.ResourceList, error) {
	all := corev1.ResourceList{}
	if t.Usage != nil {
		u, err := t.Usage(ctx, obj, writing, creating)
		if err != nil {
			return nil, err
		}
		maps.Copy(all, u)
	}
	if _, said := all[t.countName()]; !said {
		all[t.countName()] = *resource.NewQuantity(1, resource.DecimalSI)
	}
	out := corev1.ResourceList{}
	for name, q := range all {
		if _, limited := b.opts.Limits[name]; limited {
			out[name] = q
		}
	}
	return out, nil
}

// Add adds add to sum, name by name.
func Add(sum, add corev1.ResourceList) {
	for name, q := range add {
		v := sum[name]
		v.Add(q)
		sum[name] = v
	}
}

// subFrom takes sub off sum, name by name.
func subFrom(sum, sub corev1.ResourceList) {
	for name, q := range sub {
		v := sum[name]
		v.Sub(q)
		sum[name] = v
	}
}
