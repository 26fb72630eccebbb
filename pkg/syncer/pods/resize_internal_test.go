package pods

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// A resize puts the requests and limits the tenant's containers state over
// the host Pod's: what the host gave beside them stays, and a Pod the
// tenant has not resized is not resized.
func TestResizedHost(t *testing.T) {
	q := resource.MustParse
	pod := func(cpu, limitCPU string, extra corev1.ResourceList) *corev1.Pod {
		req := corev1.ResourceList{corev1.ResourceCPU: q(cpu)}
		for k, v := range extra {
			req[k] = v
		}
		return &corev1.Pod{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init"}},
			Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
				Requests: req, Limits: corev1.ResourceList{corev1.ResourceCPU: q(limitCPU)},
			}}},
		}}
	}
	// The host's LimitRange gave a memory request the tenant never asked for.
	host := pod("100m", "1", corev1.ResourceList{corev1.ResourceMemory: q("64Mi")})

	if _, changed := resizedHost(pod("100m", "1", nil), host); changed {
		t.Error("a Pod the tenant has not resized is resized")
	}
	if _, changed := resizedHost(pod("0.1", "1000m", nil), host); changed {
		t.Error("the same quantities written otherwise resize the Pod")
	}
	resized, changed := resizedHost(pod("250m", "2", nil), host)
	if !changed {
		t.Fatal("a resized tenant Pod is not resized in the host")
	}
	got := resized.Spec.Containers[0].Resources
	if got.Requests.Cpu().Cmp(q("250m")) != 0 || got.Limits.Cpu().Cmp(q("2")) != 0 || got.Requests.Memory().Cmp(q("64Mi")) != 0 {
		t.Errorf("host resources %+v: want the tenant's CPU and the host's memory default", got)
	}
	if host.Spec.Containers[0].Resources.Requests.Cpu().Cmp(q("100m")) != 0 {
		t.Error("the host Pod read was changed")
	}
}
