package pods

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/internal/quota"
)

// usage is what a host Pod takes of its tenant's budget
// (syncer.Syncer.Usage), as a ResourceQuota counts it once the host
// admits the Pod: with the LimitRange's defaults and its RuntimeClass's
// overhead. An ended Pod takes nothing. A new Pod that leaves a compute
// resource the budget counts unstated is refused.
func usage(ctx context.Context, obj client.Object, in syncer.UsageInput) (corev1.ResourceList, error) {
	pod := obj.(*corev1.Pod)
	if ended(pod) {
		return corev1.ResourceList{corev1.ResourcePods: {}, "count/pods": {}}, nil
	}
	if in.Writing {
		var err error
		if pod, err = withOverhead(ctx, in.Host, pod); err != nil {
			return nil, err
		}
	}
	pod = withDefaults(pod, in.LimitRange)
	if in.Creating {
		if err := statesWhatItCounts(pod, in.Budget); err != nil {
			return nil, err
		}
	}
	out := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(1, resource.DecimalSI)}
	requests, limits := podResources(&pod.Spec)
	for name, q := range requests {
		out[corev1.ResourceName("requests."+string(name))] = q
		if name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == corev1.ResourceEphemeralStorage {
			out[name] = q // the short names are requests
		}
	}
	for name, q := range limits {
		out[corev1.ResourceName("limits."+string(name))] = q
	}
	return out, nil
}

// withOverhead is pod with the overhead that the host's RuntimeClass
// admission gives it: its runtime class's fixed overhead, which a host
// copy never states itself (the tenant's is left out). A runtime class
// the host does not have gives none; the host refuses such a Pod anyway.
func withOverhead(ctx context.Context, host client.Reader, pod *corev1.Pod) (*corev1.Pod, error) {
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName == "" || pod.Spec.Overhead != nil {
		return pod, nil
	}
	var rc nodev1.RuntimeClass
	if err := host.Get(ctx, client.ObjectKey{Name: *pod.Spec.RuntimeClassName}, &rc); apierrors.IsNotFound(err) {
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
func statesWhatItCounts(pod *corev1.Pod, budget corev1.ResourceList) error {
	if ended(pod) {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(budget)) {
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
					return syncer.Refuse("the host budget of this cluster counts %s, and container %s states no %s.%s: state it, "+
						"or have the VirtualCluster's spec.hostPolicy.limitRange give a default", name, c.Name, what, need.resource)
				}
			}
		}
	}
	return nil
}

// podResources are a Pod's requests and limits as a quota counts them: its
// pod-level resources where set, else the larger of its containers' sum
// (sidecars included) and any one init container's (with the sidecars
// started before it), plus the overhead of its runtime class.
func podResources(spec *corev1.PodSpec) (requests, limits corev1.ResourceList) {
	of := func(pick func(corev1.ResourceRequirements) corev1.ResourceList) corev1.ResourceList {
		sum, sidecars := corev1.ResourceList{}, corev1.ResourceList{}
		for _, c := range spec.Containers {
			quota.Add(sum, pick(c.Resources))
		}
		peak := corev1.ResourceList{}
		for _, c := range spec.InitContainers {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				quota.Add(sidecars, pick(c.Resources))
				quota.Add(sum, pick(c.Resources))
				continue
			}
			running := corev1.ResourceList{}
			quota.Add(running, sidecars)
			quota.Add(running, pick(c.Resources))
			maxInto(peak, running)
		}
		maxInto(sum, peak)
		quota.Add(sum, spec.Overhead)
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

// maxInto raises each of dst's quantities to src's where larger.
func maxInto(dst, src corev1.ResourceList) {
	for name, q := range src {
		if v, ok := dst[name]; !ok || q.Cmp(v) > 0 {
			dst[name] = q
		}
	}
}
