package syncer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// BudgetReporter is told the totals a tenant takes of its budget
// (Options.Budget) when they change: the resources the budget names,
// summed over the tenant's host copies.
type BudgetReporter func(ctx context.Context, used corev1.ResourceList) error

// budgetReportPeriod is how often a tenant's budget totals are summed for
// its BudgetReporter, which hears of them only when they changed.
const budgetReportPeriod = 5 * time.Second

// resourceBudget holds one tenant to its budget: the most it may have in
// the host over all its host namespaces, by ResourceQuota's names. Every
// write of a host copy that would add to a resource the budget names asks
// it first (admit), under one lock per tenant, so that concurrent syncs
// never take the tenant over: what the hub's cache does not show yet, the
// writes admitted and in flight or not yet seen, counts too. A tenant's
// syncs run in one replica at a time (its Lease, with --shard-mode), so
// the lock is the tenant's only writer.
type resourceBudget struct {
	cluster string
	limits  corev1.ResourceList
	// limitRange is the LimitRange the tenant's host namespaces hold
	// (Options.LimitRange), whose defaults the host gives a Pod at its
	// admission: a Pod counts as the host will hold it.
	limitRange *corev1.LimitRangeSpec
	read       client.Reader // the hub's cache
	scheme     *runtime.Scheme

	mu sync.Mutex
	// types are the synced types, by GVK, that the budget counts.
	types map[schema.GroupVersionKind]countedType
	// pending are the writes admitted and not yet seen in the cache: what
	// each adds, and what it replaces.
	pending map[pendingKey]*pendingWrite
}

// countedType is a synced type that the budget counts: its syncer, and
// its name in count/<resource>[.<group>].
type countedType struct {
	syncer *Syncer
	count  corev1.ResourceName
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

func newResourceBudget(cluster string, limits corev1.ResourceList, limitRange *corev1.LimitRangeSpec, read client.Reader, scheme *runtime.Scheme) *resourceBudget {
	return &resourceBudget{cluster: cluster, limits: limits, limitRange: limitRange, read: read, scheme: scheme,
		types: map[schema.GroupVersionKind]countedType{}, pending: map[pendingKey]*pendingWrite{}}
}

// count makes the budget count s's objects, of type gvk, whose plural
// resource name is resource.
func (b *resourceBudget) count(s *Syncer, gvk schema.GroupVersionKind, resource string) {
	name := "count/" + resource
	if gvk.Group != "" {
		name += "." + gvk.Group
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.types[gvk] = countedType{syncer: s, count: corev1.ResourceName(name)}
}

// admit is asked before current (nil for a create) is written as desired,
// both host objects of type gvk. It refuses (Refuse) a write that would
// take a total over the budget, naming the resource; otherwise it counts
// the write as in flight until settle is called with its outcome.
func (b *resourceBudget) admit(ctx context.Context, gvk schema.GroupVersionKind, current, desired client.Object) (settle func(err error), err error) {
	noop := func(error) {}
	if b == nil {
		return noop, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, counted := b.types[gvk]
	if !counted {
		return noop, nil
	}
	if pod, ok := desired.(*corev1.Pod); ok {
		if desired, err = b.withOverhead(ctx, pod); err != nil {
			return nil, err
		}
		if current == nil {
			if err := b.statesWhatItCounts(withDefaults(desired.(*corev1.Pod), b.limitRange)); err != nil {
				return nil, err
			}
		}
	}
	wants := b.usage(s, desired)
	adds := maps.Clone(wants)
	before := ""
	if current != nil {
		before = current.GetResourceVersion()
		subFrom(adds, b.usage(s, current))
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
		if limit := b.limits[name]; total.Cmp(limit) > 0 {
			return nil, Refuse("the host budget of this cluster has no room: %s would be %s, over %s (%s used); "+
				"free some, or raise it in the VirtualCluster's spec.hostPolicy.budget", name, total.String(), limit.String(), quantity(used[name]))
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

// countNamespaces is the budget's name of the host namespaces a tenant has.
const countNamespaces corev1.ResourceName = "count/namespaces"

// admitNamespace refuses one more host namespace when the budget counts
// count/namespaces and the tenant has as many as it allows: those in the
// cache, and recent, those it made a moment ago that the cache may not
// show yet. The caller serializes the namespaces it makes.
func (b *resourceBudget) admitNamespace(ctx context.Context, recent []string) error {
	if b == nil {
		return nil
	}
	limit, counted := b.limits[countNamespaces]
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
		return Refuse("the host budget of this cluster has no room: %s would be %s, over %s (%d used); "+
			"free some, or raise it in the VirtualCluster's spec.hostPolicy.budget", countNamespaces, total.String(), limit.String(), len(names))
	}
	return nil
}

// namespaces are the names of the tenant's host namespaces in the cache.
func (b *resourceBudget) namespaces(ctx context.Context) ([]string, error) {
	var list corev1.NamespaceList
	if err := b.read.List(ctx, &list, client.MatchingLabels{LabelManagedBy: ManagedByValue, LabelCluster: b.cluster}); err != nil {
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
func (b *resourceBudget) usedOf(ctx context.Context, gvk schema.GroupVersionKind, skip pendingKey) (corev1.ResourceList, error) {
	s := b.types[gvk]
	objs, err := b.list(ctx, gvk)
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
		addTo(used, b.usage(s, o))
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
			subFrom(used, b.usage(s, o)) // the write replaces what the cache shows
		}
		addTo(used, w.usage)
	}
	return used, nil
}

// list reads the tenant's host copies of gvk from the cache.
func (b *resourceBudget) list(ctx context.Context, gvk schema.GroupVersionKind) ([]client.Object, error) {
	list := listFor(b.types[gvk].syncer.Object(), gvk, b.scheme)
	// Read only: the cache's own objects, not copies of each.
	if err := b.read.List(ctx, list, client.MatchingFields{clusterIndex: b.cluster}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("counting the budget of %s: %w", gvk.Kind, err)
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

// used sums every resource the budget names.
func (b *resourceBudget) used(ctx context.Context) (corev1.ResourceList, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	used := corev1.ResourceList{}
	for gvk := range b.types {
		u, err := b.usedOf(ctx, gvk, pendingKey{})
		if err != nil {
			return nil, err
		}
		addTo(used, u)
	}
	if _, counted := b.limits[countNamespaces]; counted {
		names, err := b.namespaces(ctx)
		if err != nil {
			return nil, err
		}
		used[countNamespaces] = *resource.NewQuantity(int64(len(names)), resource.DecimalSI)
	}
	out := corev1.ResourceList{}
	for name := range b.limits {
		out[name] = used[name] // a resource of none shows 0
		if q := out[name]; q.Format == "" {
			out[name] = *resource.NewQuantity(0, resource.DecimalSI)
		}
	}
	return out, nil
}

// report tells reporter the totals every period while they change, until
// ctx ends.
func (b *resourceBudget) report(ctx context.Context, log logr.Logger, reporter BudgetReporter) {
	var last corev1.ResourceList
	tick := time.NewTicker(budgetReportPeriod)
	defer tick.Stop()
	for {
		used, err := b.used(ctx)
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
// resources the budget names, in ResourceQuota's terms.
func (b *resourceBudget) usage(t countedType, obj client.Object) corev1.ResourceList {
	if pod, ok := obj.(*corev1.Pod); ok {
		obj = withDefaults(pod, b.limitRange)
	}
	all := objectUsage(obj)
	if !terminal(obj) {
		all[t.count] = *resource.NewQuantity(1, resource.DecimalSI)
	}
	out := corev1.ResourceList{}
	for name, q := range all {
		if _, limited := b.limits[name]; limited {
			out[name] = q
		}
	}
	return out
}

// withOverhead is pod with the overhead that the host's RuntimeClass
// admission gives it: its runtime class's fixed overhead, which a host
// copy never states itself (the tenant's is left out). A runtime class
// the host does not have gives none; the host refuses such a Pod anyway.
func (b *resourceBudget) withOverhead(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName == "" || pod.Spec.Overhead != nil {
		return pod, nil
	}
	var rc nodev1.RuntimeClass
	if err := b.read.Get(ctx, client.ObjectKey{Name: *pod.Spec.RuntimeClassName}, &rc); apierrors.IsNotFound(err) {
		return pod, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading the overhead of RuntimeClass %s: %w", *pod.Spec.RuntimeClassName, err)
	}
	if rc.Overhead == nil || len(rc.Overhead.PodFixed) == 0 {
		return pod, nil
	}
	out := pod.DeepCopy()
	out.Spec.Overhead = rc.Overhead.PodFixed.DeepCopy()
	return out, nil
}

// withDefaults is pod as the host's admission makes it in a namespace
// holding limitRange (nil: none): every container (and init container)
// gets the LimitRange's default limits and default requests that it does
// not state, as the LimitRanger plugin gives them.
func withDefaults(pod *corev1.Pod, limitRange *corev1.LimitRangeSpec) *corev1.Pod {
	if limitRange == nil || !lacksAny(pod, limitRange) {
		return pod // nothing to give: no copy
	}
	out := pod.DeepCopy()
	for _, item := range limitRange.Limits {
		if item.Type != corev1.LimitTypeContainer {
			continue
		}
		// As the API server defaults a LimitRange: a default limit from its
		// max, a default request from the default limit, else its min.
		limits := maps.Clone(item.Max)
		if limits == nil {
			limits = corev1.ResourceList{}
		}
		maps.Copy(limits, item.Default)
		requests := maps.Clone(item.Min)
		if requests == nil {
			requests = corev1.ResourceList{}
		}
		maps.Copy(requests, limits)
		maps.Copy(requests, item.DefaultRequest)
		for _, cs := range [][]corev1.Container{out.Spec.InitContainers, out.Spec.Containers} {
			for i := range cs {
				r := &cs[i].Resources
				for name, q := range limits {
					if _, set := r.Limits[name]; !set {
						if r.Limits == nil {
							r.Limits = corev1.ResourceList{}
						}
						r.Limits[name] = q
					}
				}
				for name, q := range requests {
					if _, set := r.Requests[name]; !set {
						if r.Requests == nil {
							r.Requests = corev1.ResourceList{}
						}
						r.Requests[name] = q
					}
				}
			}
		}
	}
	return out
}

// lacksAny says whether a container of pod states no request or limit of
// a resource that limitRange's container items name.
func lacksAny(pod *corev1.Pod, limitRange *corev1.LimitRangeSpec) bool {
	for _, item := range limitRange.Limits {
		if item.Type != corev1.LimitTypeContainer {
			continue
		}
		named := slices.Concat(slices.Collect(maps.Keys(item.Default)), slices.Collect(maps.Keys(item.DefaultRequest)),
			slices.Collect(maps.Keys(item.Max)), slices.Collect(maps.Keys(item.Min)))
		for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for _, c := range cs {
				for _, name := range named {
					_, limited := c.Resources.Limits[name]
					_, requested := c.Resources.Requests[name]
					if !limited || !requested {
						return true
					}
				}
			}
		}
	}
	return false
}

// computeBudgetNames are the budget's compute names, each with what a
// container must state for it: a request or a limit of a resource.
var computeBudgetNames = map[corev1.ResourceName]struct {
	limit    bool
	resource corev1.ResourceName
}{
	corev1.ResourceCPU: {false, corev1.ResourceCPU}, corev1.ResourceRequestsCPU: {false, corev1.ResourceCPU}, corev1.ResourceLimitsCPU: {true, corev1.ResourceCPU},
	corev1.ResourceMemory: {false, corev1.ResourceMemory}, corev1.ResourceRequestsMemory: {false, corev1.ResourceMemory}, corev1.ResourceLimitsMemory: {true, corev1.ResourceMemory},
	corev1.ResourceEphemeralStorage: {false, corev1.ResourceEphemeralStorage}, corev1.ResourceRequestsEphemeralStorage: {false, corev1.ResourceEphemeralStorage},
	corev1.ResourceLimitsEphemeralStorage: {true, corev1.ResourceEphemeralStorage},
}

// statesWhatItCounts refuses a new Pod that leaves a compute resource the
// budget counts unstated (after the LimitRange's defaults), as
// ResourceQuota refuses it: counted as nothing, it would take whatever
// the host then gives it.
func (b *resourceBudget) statesWhatItCounts(pod *corev1.Pod) error {
	if terminal(pod) {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(b.limits)) {
		need, counted := computeBudgetNames[name]
		if !counted {
			continue
		}
		stated := func(r corev1.ResourceRequirements) bool {
			list := r.Requests
			if need.limit {
				list = r.Limits
			}
			_, ok := list[need.resource]
			return ok
		}
		if r := pod.Spec.Resources; r != nil && stated(*r) {
			continue
		}
		for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for _, c := range cs {
				if !stated(c.Resources) {
					what := "requests"
					if need.limit {
						what = "limits"
					}
					return Refuse("the host budget of this cluster counts %s, and container %s states no %s.%s: state it, "+
						"or have the VirtualCluster's spec.hostPolicy.limitRange give a default", name, c.Name, what, need.resource)
				}
			}
		}
	}
	return nil
}

// terminal says whether obj is a Pod that ended: a quota counts it no more.
func terminal(obj client.Object) bool {
	p, ok := obj.(*corev1.Pod)
	return ok && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)
}

// objectUsage is what obj takes by ResourceQuota's object and compute
// names; count/ names are usage's.
func objectUsage(obj client.Object) corev1.ResourceList {
	one := *resource.NewQuantity(1, resource.DecimalSI)
	out := corev1.ResourceList{}
	switch o := obj.(type) {
	case *corev1.Pod:
		if terminal(o) {
			return out
		}
		out[corev1.ResourcePods] = one
		requests, limits := podResources(&o.Spec)
		for name, q := range requests {
			out[corev1.ResourceName("requests."+string(name))] = q
			if name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == corev1.ResourceEphemeralStorage {
				out[name] = q // the short names are requests
			}
		}
		for name, q := range limits {
			out[corev1.ResourceName("limits."+string(name))] = q
		}
	case *corev1.Service:
		out[corev1.ResourceServices] = one
		switch o.Spec.Type {
		case corev1.ServiceTypeLoadBalancer:
			out[corev1.ResourceServicesLoadBalancers] = one
			fallthrough
		case corev1.ServiceTypeNodePort:
			out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(int64(len(o.Spec.Ports)), resource.DecimalSI)
		}
	case *corev1.PersistentVolumeClaim:
		out[corev1.ResourcePersistentVolumeClaims] = one
		if q, ok := o.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			out[corev1.ResourceRequestsStorage] = q
		}
	case *corev1.ConfigMap:
		out[corev1.ResourceConfigMaps] = one
	case *corev1.Secret:
		out[corev1.ResourceSecrets] = one
	}
	return out
}

// podResources are a Pod's requests and limits as a quota counts them: its
// pod-level resources where set, else the larger of its containers' sum
// (sidecars included) and any one init container's (with the sidecars
// started before it), plus the overhead of its runtime class.
func podResources(spec *corev1.PodSpec) (requests, limits corev1.ResourceList) {
	of := func(pick func(corev1.ResourceRequirements) corev1.ResourceList) corev1.ResourceList {
		sum, sidecars := corev1.ResourceList{}, corev1.ResourceList{}
		for _, c := range spec.Containers {
			addTo(sum, pick(c.Resources))
		}
		peak := corev1.ResourceList{}
		for _, c := range spec.InitContainers {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				addTo(sidecars, pick(c.Resources))
				addTo(sum, pick(c.Resources))
				continue
			}
			running := corev1.ResourceList{}
			addTo(running, sidecars)
			addTo(running, pick(c.Resources))
			maxInto(peak, running)
		}
		maxInto(sum, peak)
		addTo(sum, spec.Overhead)
		return sum
	}
	requests = of(func(r corev1.ResourceRequirements) corev1.ResourceList { return r.Requests })
	limits = of(func(r corev1.ResourceRequirements) corev1.ResourceList { return r.Limits })
	if r := spec.Resources; r != nil {
		maps.Copy(requests, r.Requests)
		maps.Copy(limits, r.Limits)
	}
	return requests, limits
}

// addTo adds add to sum, name by name.
func addTo(sum, add corev1.ResourceList) {
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

// maxInto raises each of dst's quantities to src's where larger.
func maxInto(dst, src corev1.ResourceList) {
	for name, q := range src {
		if v, ok := dst[name]; !ok || q.Cmp(v) > 0 {
			dst[name] = q
		}
	}
}

// ValidateBudget says what is wrong with a budget's names: each must be
// one that the budget counts.
func ValidateBudget(budget corev1.ResourceList) error {
	for name, q := range budget {
		n := string(name)
		switch {
		case q.Sign() < 0:
			return fmt.Errorf("%s: %s is negative", n, q.String())
		case slices.Contains(BudgetResources, name):
		case strings.HasPrefix(n, "count/") && len(n) > len("count/"):
		default:
			return fmt.Errorf("%s is not a resource the budget counts: one of %v, or count/<resource>[.<group>]", n, BudgetResources)
		}
	}
	return nil
}

// BudgetResources are the resource names, besides count/<resource>[.<group>],
// that a budget counts.
var BudgetResources = []corev1.ResourceName{
	corev1.ResourcePods, corev1.ResourceServices, corev1.ResourcePersistentVolumeClaims, corev1.ResourceConfigMaps, corev1.ResourceSecrets,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers, corev1.ResourceRequestsStorage,
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage,
}
