package builtin

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPodPolicy(t *testing.T) {
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
		stripped, err := PodPolicy{}.apply(&spec)
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
		policy := PodPolicy{
			AllowedPriorityClasses: []string{"system-node-critical"}, AllowedSchedulerNames: []string{"my-scheduler"},
			AllowedRuntimeClasses: []string{"kata"},
			NodeSelector:          map[string]string{"pool": "tenants"}, Tolerations: []corev1.Toleration{gpu},
		}
		if _, err := policy.apply(&spec); err != nil {
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
		if _, err := (PodPolicy{}).apply(&spec); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("a %s volume: %v, want a refusal naming it", name, err)
		}
	}
}
