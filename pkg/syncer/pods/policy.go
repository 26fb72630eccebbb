package pods

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// Policy is what the host lets a tenant's Pods ask of it. A Pod field
// the policy does not allow is left out of the host copy, and the tenant
// told once (a Normal Event, reason syncer.ReasonHostStripped), when the
// Pod still runs as meant without it; a Pod that asks for the host's
// machines themselves (hostPath, gitRepo volumes) is refused (a Warning
// Event, reason syncer.ReasonHostRejected).
//
// The zero Policy is the safe default: no priority class (the host's
// default priority applies), the default scheduler, no runtime class, no
// tolerations but those of not-ready and unreachable nodes that every Pod
// gets, and no node selector on node roles.
type Policy struct {
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
	// AllowedVolumeTypes are volume types a tenant Pod may use besides
	// AlwaysAllowedVolumeTypes, as the API spells them ("hostPath", "nfs",
	// "csi", "iscsi"). gitRepo never is: it runs git on the host's node.
	AllowedVolumeTypes []string
	// NodeSelector is put on every host Pod, over the tenant's own keys of
	// the same name: the nodes the host gives the tenant.
	NodeSelector map[string]string
	// Tolerations are added to every host Pod: the taints of the nodes the
	// host gives the tenant.
	Tolerations []corev1.Toleration
	// Storage is which host storage the claim templates of the Pod's
	// ephemeral volumes may ask for.
	Storage StoragePolicy
	// KeepImagePullPolicy keeps the containers' imagePullPolicy as the
	// tenant wrote it; otherwise every host container pulls Always, so
	// that a tenant runs only the images its own credentials pull, never
	// another tenant's private image that a node holds.
	KeepImagePullPolicy bool
}

// tenantTolerations are the tolerations a tenant Pod keeps: those of
// not-ready and unreachable nodes, which the tenant's admission gives every
// Pod (for how long it stays on a failing node).
var tenantTolerations = []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}

// deniedNodeSelectorPrefixes are node label prefixes a tenant Pod may not
// select on: node roles, as the control plane's.
var deniedNodeSelectorPrefixes = []string{"node-role.kubernetes.io/"}

// apply makes spec, the host Pod spec of a Pod of VirtualCluster cluster,
// what p allows, and says what it left out; a spec it refuses is an error
// (syncer.Refuse).
func (p Policy) apply(spec *corev1.PodSpec, cluster string) (stripped []string, err error) {
	for _, v := range spec.Volumes {
		kind := volumeKind(v.VolumeSource)
		if slices.Contains(AlwaysAllowedVolumeTypes, kind) || (kind != "gitRepo" && slices.Contains(p.AllowedVolumeTypes, kind)) {
			continue
		}
		allow := "; the VirtualCluster's spec.hostPolicy.pods.allowedVolumeTypes can allow it"
		if kind == "gitRepo" || !slices.Contains([]string{"hostPath", "nfs", "csi", "iscsi"}, kind) {
			allow = "; no policy allows it"
		}
		return nil, syncer.Refuse("volume %s is of type %s, which would reach the host's machines or storage directly: "+
			"a tenant Pod may use %s volumes%s", v.Name, kind, strings.Join(append(slices.Clone(AlwaysAllowedVolumeTypes), p.AllowedVolumeTypes...), ", "), allow)
	}
	if !p.KeepImagePullPolicy {
		var pulled []string
		for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range cs {
				if cs[i].ImagePullPolicy != corev1.PullAlways {
					cs[i].ImagePullPolicy = corev1.PullAlways
					pulled = append(pulled, cs[i].Name)
				}
			}
		}
		// An image volume mounts an image as a container runs one.
		for i := range spec.Volumes {
			if v := spec.Volumes[i].Image; v != nil && v.PullPolicy != corev1.PullAlways {
				v.PullPolicy = corev1.PullAlways
				pulled = append(pulled, "volume "+spec.Volumes[i].Name)
			}
		}
		if len(pulled) > 0 {
			stripped = append(stripped, fmt.Sprintf("imagePullPolicy of %s (Always in the host: the images a node holds are every tenant's)", strings.Join(pulled, ", ")))
		}
	}
	// The host's admission computes these from the priority class and the
	// runtime class.
	spec.Priority, spec.PreemptionPolicy, spec.Overhead = nil, nil, nil
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
		// How long to stay on a failing node, as the tenant's admission
		// sets it; never to go there, nor to stay for good.
		if slices.Contains(tenantTolerations, t.Key) && t.Effect == corev1.TaintEffectNoExecute && t.TolerationSeconds != nil {
			kept = append(kept, t)
			continue
		}
		stripped = append(stripped, "toleration "+describeToleration(t))
	}
	spec.Tolerations = append(kept, p.Tolerations...)
	for _, k := range slices.Sorted(maps.Keys(spec.NodeSelector)) {
		if deniedNodeLabel(k) {
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
	stripped = append(stripped, scopeAffinity(spec.Affinity, cluster)...)
	for _, c := range spec.TopologySpreadConstraints {
		if deniedNodeLabel(c.TopologyKey) {
			stripped = append(stripped, "topologySpreadConstraint on "+c.TopologyKey)
		}
	}
	spec.TopologySpreadConstraints = slices.DeleteFunc(spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
		return deniedNodeLabel(c.TopologyKey) // only nodes with the key count: a node selector
	})
	for i := range spec.Volumes {
		e := spec.Volumes[i].Ephemeral
		if e == nil || e.VolumeClaimTemplate == nil {
			continue
		}
		name := spec.Volumes[i].Name
		if err := p.Storage.Check(fmt.Sprintf("volume %s's claim template", name), &e.VolumeClaimTemplate.Spec); err != nil {
			return nil, err
		}
		if taken := OwnVolumesOnly(&e.VolumeClaimTemplate.Spec); len(taken) > 0 {
			stripped = append(stripped, fmt.Sprintf("volume %s's %s (a tenant cannot pick a host volume)", name, strings.Join(taken, ", ")))
		}
		// The host's ephemeral volume controller puts the template's
		// metadata on the claim it makes, where no policy of Tenantry's
		// would filter it (and Tenantry's own keys would pass it off as a
		// copy).
		if meta := &e.VolumeClaimTemplate.ObjectMeta; len(meta.Labels)+len(meta.Annotations) > 0 {
			meta.Labels, meta.Annotations = nil, nil
			stripped = append(stripped, fmt.Sprintf("volume %s's claim template labels and annotations", name))
		}
	}
	return stripped, nil
}

// AlwaysAllowedVolumeTypes are the volume types every tenant Pod may use:
// those whose data come from its own namespace or its own node's scratch
// space.
var AlwaysAllowedVolumeTypes = []string{"configMap", "secret", "emptyDir", "projected", "downwardAPI", "persistentVolumeClaim", "ephemeral", "image"}

// volumeKind names a volume source's type as the API spells it.
func volumeKind(v corev1.VolumeSource) string {
	switch {
	case v.ConfigMap != nil:
		return "configMap"
	case v.Secret != nil:
		return "secret"
	case v.EmptyDir != nil:
		return "emptyDir"
	case v.Projected != nil:
		return "projected"
	case v.DownwardAPI != nil:
		return "downwardAPI"
	case v.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case v.Ephemeral != nil:
		return "ephemeral"
	case v.Image != nil:
		return "image"
	case v.HostPath != nil:
		return "hostPath"
	case v.GitRepo != nil:
		return "gitRepo"
	case v.NFS != nil:
		return "nfs"
	case v.CSI != nil:
		return "csi"
	case v.ISCSI != nil:
		return "iscsi"
	}
	return "a direct storage source"
}

// scopeAffinity keeps a Pod's affinity to other Pods within its own
// VirtualCluster: namespaces it names become their host namespaces, and a
// namespace selector (tenant namespaces' labels do not reach the host)
// becomes every namespace of the VirtualCluster. Otherwise a tenant's
// anti-affinity to every Pod of every namespace would keep the host's and
// other tenants' Pods off whole zones. Node affinity on node roles is left
// out, as for node selectors.
func scopeAffinity(a *corev1.Affinity, cluster string) (stripped []string) {
	if a == nil {
		return nil
	}
	scopeTerm := func(t *corev1.PodAffinityTerm) {
		for j, ns := range t.Namespaces {
			t.Namespaces[j] = syncer.HostNamespace(cluster, ns)
		}
		if t.NamespaceSelector != nil {
			t.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{syncer.LabelCluster: cluster}}
		}
	}
	scope := func(terms []corev1.PodAffinityTerm) {
		for i := range terms {
			scopeTerm(&terms[i])
		}
	}
	weighted := func(terms []corev1.WeightedPodAffinityTerm) {
		for i := range terms {
			scopeTerm(&terms[i].PodAffinityTerm)
		}
	}
	if p := a.PodAffinity; p != nil {
		scope(p.RequiredDuringSchedulingIgnoredDuringExecution)
		weighted(p.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	if p := a.PodAntiAffinity; p != nil {
		scope(p.RequiredDuringSchedulingIgnoredDuringExecution)
		weighted(p.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	if n := a.NodeAffinity; n != nil {
		deny := func(reqs []corev1.NodeSelectorRequirement) []corev1.NodeSelectorRequirement {
			return slices.DeleteFunc(reqs, func(r corev1.NodeSelectorRequirement) bool {
				if deniedNodeLabel(r.Key) {
					stripped = append(stripped, "node affinity on "+r.Key)
					return true
				}
				return false
			})
		}
		// A term left with no requirement would match no node: it goes.
		emptied := func(t corev1.NodeSelectorTerm) bool { return len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0 }
		if req := n.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
			for i := range req.NodeSelectorTerms {
				req.NodeSelectorTerms[i].MatchExpressions = deny(req.NodeSelectorTerms[i].MatchExpressions)
			}
			if req.NodeSelectorTerms = slices.DeleteFunc(req.NodeSelectorTerms, emptied); len(req.NodeSelectorTerms) == 0 {
				n.RequiredDuringSchedulingIgnoredDuringExecution = nil
			}
		}
		for i := range n.PreferredDuringSchedulingIgnoredDuringExecution {
			pref := &n.PreferredDuringSchedulingIgnoredDuringExecution[i].Preference
			pref.MatchExpressions = deny(pref.MatchExpressions)
		}
		n.PreferredDuringSchedulingIgnoredDuringExecution = slices.DeleteFunc(n.PreferredDuringSchedulingIgnoredDuringExecution,
			func(t corev1.PreferredSchedulingTerm) bool { return emptied(t.Preference) })
	}
	return stripped
}

// deniedNodeLabel says whether a tenant Pod may not select nodes on key.
func deniedNodeLabel(key string) bool {
	return slices.ContainsFunc(deniedNodeSelectorPrefixes, func(prefix string) bool { return strings.HasPrefix(key, prefix) })
}

func describeToleration(t corev1.Toleration) string {
	if t.Key == "" {
		return "of every taint"
	}
	return t.Key
}

// OwnVolumesOnly takes out of a claim's spec what would let a tenant pick a
// host volume, or data, not its own: the volume name, a volume selector,
// and a data source in another namespace. It says what it took out. The
// Pod syncer applies it to ephemeral volumes' claim templates, the claim
// syncer (package builtin) to claims.
func OwnVolumesOnly(spec *corev1.PersistentVolumeClaimSpec) (taken []string) {
	if spec.VolumeName != "" {
		spec.VolumeName = ""
		taken = append(taken, "volumeName")
	}
	if spec.Selector != nil {
		spec.Selector = nil
		taken = append(taken, "selector")
	}
	if spec.DataSourceRef != nil && spec.DataSourceRef.Namespace != nil {
		spec.DataSourceRef, spec.DataSource = nil, nil
		taken = append(taken, "dataSourceRef in another namespace")
	}
	return taken
}
