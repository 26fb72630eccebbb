package builtin

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// PodPolicy is what the host lets a tenant's Pods ask of it. A Pod field
// the policy does not allow is left out of the host copy, and the tenant
// told once (a Normal Event, reason syncer.ReasonHostStripped), when the
// Pod still runs as meant without it; a Pod that asks for the host's
// machines themselves (hostPath, gitRepo volumes) is refused (a Warning
// Event, reason syncer.ReasonHostRejected).
//
// The zero PodPolicy is the safe default: no priority class (the host's
// default priority applies), the default scheduler, no runtime class, no
// tolerations but those of not-ready and unreachable nodes that every Pod
// gets, and no node selector on node roles.
type PodPolicy struct {
	// AllowedPriorityClasses are the host PriorityClasses a tenant Pod may
	// name; any other is left out, so that a tenant cannot preempt the
	// host's workloads.
	AllowedPriorityClasses []string
	// AllowedSchedulerNames are the host schedulers a tenant Pod may name,
	// besides default-scheduler.
	AllowedSchedulerNames []string
	// AllowedRuntimeClasses are the host RuntimeClasses a tenant Pod may
	// name.
	AllowedRuntimeClasses []string
	// NodeSelector is put on every host Pod, over the tenant's own keys of
	// the same name: the nodes the host gives the tenant.
	NodeSelector map[string]string
	// Tolerations are added to every host Pod: the taints of the nodes the
	// host gives the tenant.
	Tolerations []corev1.Toleration
}

// tenantTolerations are the tolerations a tenant Pod keeps: those of
// not-ready and unreachable nodes, which the tenant's admission gives every
// Pod (for how long it stays on a failing node).
var tenantTolerations = []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}

// deniedNodeSelectorPrefixes are node label prefixes a tenant Pod may not
// select on: node roles, as the control plane's.
var deniedNodeSelectorPrefixes = []string{"node-role.kubernetes.io/"}

// apply makes spec, a host Pod spec, what p allows, and says what it left
// out; a spec it refuses is an error (syncer.Refuse).
func (p PodPolicy) apply(spec *corev1.PodSpec) (stripped []string, err error) {
	for _, v := range spec.Volumes {
		switch {
		case v.HostPath != nil:
			return nil, syncer.Refuse("volume %s is a hostPath: a tenant Pod may not reach the host's files", v.Name)
		case v.GitRepo != nil:
			return nil, syncer.Refuse("volume %s is a gitRepo, which the host's kubelet would clone as root: use an init container", v.Name)
		}
	}
	// The host's admission computes both from the priority class.
	spec.Priority, spec.PreemptionPolicy = nil, nil
	if c := spec.PriorityClassName; c != "" && !slices.Contains(p.AllowedPriorityClasses, c) {
		spec.PriorityClassName = ""
		stripped = append(stripped, fmt.Sprintf("priorityClassName %s", c))
	}
	if s := spec.SchedulerName; s != "" && s != corev1.DefaultSchedulerName && !slices.Contains(p.AllowedSchedulerNames, s) {
		spec.SchedulerName = ""
		stripped = append(stripped, fmt.Sprintf("schedulerName %s", s))
	}
	if rc := spec.RuntimeClassName; rc != nil && !slices.Contains(p.AllowedRuntimeClasses, *rc) {
		spec.RuntimeClassName = nil
		stripped = append(stripped, fmt.Sprintf("runtimeClassName %s", *rc))
	}
	kept := spec.Tolerations[:0:0]
	for _, t := range spec.Tolerations {
		if slices.Contains(tenantTolerations, t.Key) {
			kept = append(kept, t)
			continue
		}
		stripped = append(stripped, "toleration "+describeToleration(t))
	}
	spec.Tolerations = append(kept, p.Tolerations...)
	for _, k := range slices.Sorted(maps.Keys(spec.NodeSelector)) {
		if slices.ContainsFunc(deniedNodeSelectorPrefixes, func(prefix string) bool { return strings.HasPrefix(k, prefix) }) {
			delete(spec.NodeSelector, k)
			stripped = append(stripped, "nodeSelector "+k)
		}
	}
	if len(p.NodeSelector) > 0 {
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		maps.Copy(spec.NodeSelector, p.NodeSelector)
	}
	for i := range spec.Volumes {
		e := spec.Volumes[i].Ephemeral
		if e == nil || e.VolumeClaimTemplate == nil {
			continue
		}
		claim := &e.VolumeClaimTemplate.Spec
		if claim.VolumeName != "" || claim.Selector != nil {
			claim.VolumeName, claim.Selector = "", nil
			stripped = append(stripped, fmt.Sprintf("volume %s's volumeName and selector (a tenant cannot pick a host volume)", spec.Volumes[i].Name))
		}
	}
	return stripped, nil
}

func describeToleration(t corev1.Toleration) string {
	if t.Key == "" {
		return "of every taint"
	}
	return t.Key
}
