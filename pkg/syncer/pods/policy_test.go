package pods

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPolicy(t *testing.T) {
	notReady := corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}
	everything := corev1.Toleration{Operator: corev1.TolerationOpExists}
	gpu := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}
	tenantSpec := corev1.PodSpec{
		PriorityClassName: "system-node-critical", Priority: ptr.To[int32](2000001000),
		PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority),
		SchedulerName:    "my-scheduler", RuntimeClassName: ptr.To("kata"),
		Tolerations:  []corev1.Toleration{notReady, everything},
		NodeSelector: map[string]string{"node-role.kubernetes.io/control-plane": "", "disk": "ssd", "pool": "mine"},
		Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
				VolumeName: "host-pv", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pv": "x"}},
			}},
		}}}},
	}

	t.Run("the safe default", func(t *testing.T) {
		spec := *tenantSpec.DeepCopy()
		stripped, err := Policy{}.apply(&spec, "vc")
		if err != nil {
			t.Fatal(err)
		}
		if spec.PriorityClassName != "" || spec.Priority != nil || spec.PreemptionPolicy != nil || spec.SchedulerName != "" || spec.RuntimeClassName != nil {
			t.Errorf("priority %q/%v/%v, scheduler %q, runtime class %v: want all left to the host",
				spec.PriorityClassName, spec.Priority, spec.PreemptionPolicy, spec.SchedulerName, spec.RuntimeClassName)
		}
		if len(spec.Tolerations) != 1 || !equality.Semantic.DeepEqual(spec.Tolerations[0], notReady) {
			t.Errorf("tolerations %v, want only the not-ready one", spec.Tolerations)
		}
		if _, ok := spec.NodeSelector["node-role.kubernetes.io/control-plane"]; ok || spec.NodeSelector["disk"] != "ssd" {
			t.Errorf("node selector %v: want the node role gone, the rest kept", spec.NodeSelector)
		}
		claim := spec.Volumes[0].Ephemeral.VolumeClaimTemplate.Spec
		if claim.VolumeName != "" || claim.Selector != nil {
			t.Errorf("ephemeral claim picks volume %q, selector %v", claim.VolumeName, claim.Selector)
		}
		all := strings.Join(stripped, "; ")
		for _, want := range []string{"priorityClassName system-node-critical", "schedulerName my-scheduler", "runtimeClassName kata",
			"toleration of every taint", "nodeSelector node-role.kubernetes.io/control-plane", "volume scratch's volumeName"} {
			if !strings.Contains(all, want) {
				t.Errorf("the tenant is not told of %q: %s", want, all)
			}
		}
	})

	t.Run("what the host allows and enforces", func(t *testing.T) {
		spec := *tenantSpec.DeepCopy()
		policy := Policy{
			AllowedPriorityClasses: []string{"system-node-critical"}, AllowedSchedulerNames: []string{"my-scheduler"},
			AllowedRuntimeClasses: []string{"kata"},
			NodeSelector:          map[string]string{"pool": "tenants"}, Tolerations: []corev1.Toleration{gpu},
		}
		if _, err := policy.apply(&spec, "vc"); err != nil {
			t.Fatal(err)
		}
		if spec.PriorityClassName != "system-node-critical" || spec.Priority != nil || spec.SchedulerName != "my-scheduler" || *spec.RuntimeClassName != "kata" {
			t.Errorf("allowed fields not kept: %q %v %q %v", spec.PriorityClassName, spec.Priority, spec.SchedulerName, spec.RuntimeClassName)
		}
		if spec.NodeSelector["pool"] != "tenants" {
			t.Errorf("node selector %v: want the host's pool over the tenant's", spec.NodeSelector)
		}
		if len(spec.Tolerations) != 2 || !equality.Semantic.DeepEqual(spec.Tolerations[1], gpu) {
			t.Errorf("tolerations %v, want not-ready and the host's", spec.Tolerations)
		}
	})

	for name, v := range map[string]corev1.VolumeSource{
		"hostPath": {HostPath: &corev1.HostPathVolumeSource{Path: "/"}},
		"gitRepo":  {GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://example.com/x.git"}},
	} {
		spec := corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: v}}}
		if _, err := (Policy{}).apply(&spec, "vc"); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("a %s volume: %v, want a refusal naming it", name, err)
		}
	}
}

// A tenant's Pod affinity stays within its VirtualCluster; node affinity
// on node roles goes; volumes that reach storage directly are refused; the
// host recomputes overhead; only bounded not-ready tolerations stay.
func TestPolicyScopesWhatReachesBeyondTheTenant(t *testing.T) {
	everyPod := metav1.LabelSelector{}
	spec := corev1.PodSpec{
		Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
		Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists}, // forever, any effect
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		},
		Affinity: &corev1.Affinity{
			PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
				{LabelSelector: &everyPod, NamespaceSelector: &metav1.LabelSelector{}, TopologyKey: corev1.LabelTopologyZone},
				{LabelSelector: &everyPod, Namespaces: []string{"kube-system"}, TopologyKey: corev1.LabelHostname},
			}},
			NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.NodeSelectorOpExists},
					{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}},
				},
			}}}},
		},
	}
	stripped, err := Policy{}.apply(&spec, "vc")
	if err != nil {
		t.Fatal(err)
	}
	terms := spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if sel := terms[0].NamespaceSelector; sel == nil || sel.MatchLabels["tenantry.dev/cluster"] != "vc" {
		t.Errorf("namespace selector %v, want the VirtualCluster's namespaces", sel)
	}
	if got := terms[1].Namespaces; len(got) != 1 || !strings.HasPrefix(got[0], "vc-") || !strings.HasSuffix(got[0], "-kube-system") {
		t.Errorf("namespaces %v, want the tenant's kube-system's host namespace", got)
	}
	exprs := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions
	if len(exprs) != 1 || exprs[0].Key != corev1.LabelOSStable {
		t.Errorf("node affinity %v, want only the OS", exprs)
	}
	if spec.Overhead != nil {
		t.Errorf("overhead %v, want it left to the host's admission", spec.Overhead)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != corev1.TaintNodeUnreachable {
		t.Errorf("tolerations %v, want only the bounded unreachable one", spec.Tolerations)
	}
	if all := strings.Join(stripped, "; "); !strings.Contains(all, "node affinity on node-role.kubernetes.io/control-plane") || !strings.Contains(all, "toleration node.kubernetes.io/not-ready") {
		t.Errorf("the tenant is not told: %s", all)
	}

	// The same node selection, through other doors.
	controlPlane := corev1.NodeSelectorRequirement{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.NodeSelectorOpExists}
	spec = corev1.PodSpec{
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
			{TopologyKey: "node-role.kubernetes.io/control-plane", MaxSkew: 1, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &everyPod},
			{TopologyKey: corev1.LabelTopologyZone, MaxSkew: 1, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &everyPod},
		},
		Affinity: &corev1.Affinity{
			NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{controlPlane}},
				}},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
					{Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{controlPlane}}},
				},
			},
			PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				{Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: &everyPod, NamespaceSelector: &metav1.LabelSelector{}, TopologyKey: corev1.LabelHostname}},
			}},
		},
		Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{"tenantry.dev/cluster": "another-vc"},
					Annotations: map[string]string{"volume.kubernetes.io/selected-node": "control-plane-1"},
				},
				Spec: corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{Kind: "VolumeSnapshot", Name: "theirs", Namespace: ptr.To("another-tenant")}},
			},
		}}}},
	}
	stripped, err = Policy{}.apply(&spec, "vc")
	if err != nil {
		t.Fatal(err)
	}
	if c := spec.TopologySpreadConstraints; len(c) != 1 || c[0].TopologyKey != corev1.LabelTopologyZone {
		t.Errorf("topology spread constraints %v, want only the zone's", c)
	}
	if n := spec.Affinity.NodeAffinity; n.RequiredDuringSchedulingIgnoredDuringExecution != nil || len(n.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Errorf("node affinity %+v: want the terms left empty gone (an empty required term matches no node)", n)
	}
	if sel := spec.Affinity.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.NamespaceSelector; sel == nil || sel.MatchLabels["tenantry.dev/cluster"] != "vc" {
		t.Errorf("a preferred term's namespace selector %v, want the VirtualCluster's namespaces", sel)
	}
	template := spec.Volumes[0].Ephemeral.VolumeClaimTemplate
	if template.Labels != nil || template.Annotations != nil || template.Spec.DataSourceRef != nil {
		t.Errorf("claim template %+v: want no metadata and no data source in another namespace", template)
	}
	if all := strings.Join(stripped, "; "); !strings.Contains(all, "topologySpreadConstraint on node-role") ||
		!strings.Contains(all, "claim template labels and annotations") || !strings.Contains(all, "dataSourceRef in another namespace") {
		t.Errorf("the tenant is not told: %s", all)
	}

	for _, v := range []corev1.VolumeSource{
		{NFS: &corev1.NFSVolumeSource{Server: "storage", Path: "/exports/other-tenant"}},
		{CSI: &corev1.CSIVolumeSource{Driver: "ebs.csi.aws.com"}},
		{ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.1:3260"}},
	} {
		s := corev1.PodSpec{Volumes: []corev1.Volume{{Name: "data", VolumeSource: v}}}
		if _, err := (Policy{}).apply(&s, "vc"); err == nil {
			t.Errorf("volume %+v not refused", v)
		}
	}
}

func TestPolicyVolumeTypes(t *testing.T) {
	volume := func(source corev1.VolumeSource) *corev1.PodSpec {
		return &corev1.PodSpec{Volumes: []corev1.Volume{{Name: "data", VolumeSource: source}}}
	}
	nfs := corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/"}}
	hostPath := corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
	gitRepo := corev1.VolumeSource{GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://example.com/x.git"}}
	for name, c := range map[string]struct {
		policy  Policy
		source  corev1.VolumeSource
		refused bool
	}{
		"nfs by default":            {Policy{}, nfs, true},
		"hostPath by default":       {Policy{}, hostPath, true},
		"gitRepo by default":        {Policy{}, gitRepo, true},
		"nfs allowed":               {Policy{AllowedVolumeTypes: []string{"nfs"}}, nfs, false},
		"hostPath when nfs allowed": {Policy{AllowedVolumeTypes: []string{"nfs"}}, hostPath, true},
		"gitRepo even when allowed": {Policy{AllowedVolumeTypes: []string{"gitRepo"}}, gitRepo, true},
		"configMap always":          {Policy{}, corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}, false},
	} {
		_, err := c.policy.apply(volume(c.source), "vc")
		if refused := err != nil; refused != c.refused {
			t.Errorf("%s: refused %v (%v), want %v", name, refused, err, c.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "volume data is of type") {
			t.Errorf("%s: %v does not name the volume and its type", name, err)
		}
	}
}
