package pods_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
)

// A tenant Pod that asks the host for what it must not have (a system
// priority, every toleration, the control plane's nodes, its own
// scheduler) runs without it, and the tenant is told once; one that asks
// for the host's files is refused, and the tenant told why.
func TestHostPolicyStripsAndRefusesPodFields(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	greedy := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("greedy")},
		Spec: corev1.PodSpec{
			PriorityClassName: "system-node-critical",
			SchedulerName:     "tenant-scheduler",
			RuntimeClassName:  ptr.To("tenant-runtime"),
			Tolerations:       []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			NodeSelector:      map[string]string{"node-role.kubernetes.io/control-plane": ""},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				TopologyKey: "node-role.kubernetes.io/control-plane", MaxSkew: 1, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{},
			}},
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	hostile := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("hostpath")},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app", VolumeMounts: []corev1.VolumeMount{{Name: "root", MountPath: "/host"}}}},
			Volumes:    []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
		},
	}
	cloner := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("gitrepo")},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
			Volumes: []corev1.Volume{{Name: "src", VolumeSource: corev1.VolumeSource{GitRepo: &corev1.GitRepoVolumeSource{
				Repository: "https://example.com/hooks.git",
			}}}},
		},
	}
	volumePicker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("picker")},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
					// Passed on to the host claim by the host's own controller.
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{syncer.LabelCluster: "tenant-1"}},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						VolumeName:  "someone-elses-volume",
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
					},
				},
			}}}},
		},
	}
	// The tenant's admission refuses a Pod naming a RuntimeClass it lacks.
	runtimeClass := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "tenant-runtime"}, Handler: "tenant"}
	if err := tenant.Create(ctx, runtimeClass); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{greedy, hostile, cloner, volumePicker} {
		if err := tenant.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tenant.Delete(context.Background(), p) })
	}

	expectPodRunning(t, tenant, greedy, "")
	var host corev1.Pod
	if err := shared.Host.Get(ctx, shared.HostKey("tenant-2", greedy.Namespace, greedy.Name), &host); err != nil {
		t.Fatal(err)
	}
	if host.Spec.PriorityClassName != "" || (host.Spec.Priority != nil && *host.Spec.Priority != 0) || len(host.Spec.NodeSelector) != 0 ||
		host.Spec.SchedulerName != corev1.DefaultSchedulerName || host.Spec.RuntimeClassName != nil || len(host.Spec.TopologySpreadConstraints) != 0 {
		t.Errorf("host Pod: priority class %q (%v), node selector %v, scheduler %q, runtime class %v, topology spread %v; want the host's defaults",
			host.Spec.PriorityClassName, host.Spec.Priority, host.Spec.NodeSelector, host.Spec.SchedulerName,
			host.Spec.RuntimeClassName, host.Spec.TopologySpreadConstraints)
	}
	for _, tol := range host.Spec.Tolerations {
		if tol.Key == "" {
			t.Errorf("host Pod tolerates every taint: %v", host.Spec.Tolerations)
		}
	}
	syncertest.ExpectStripped(t, tenant, greedy.Namespace, greedy.Name, "priorityClassName system-node-critical",
		"toleration of every taint", "node-role.kubernetes.io/control-plane", "schedulerName tenant-scheduler",
		"runtimeClassName tenant-runtime", "topologySpreadConstraint on node-role.kubernetes.io/control-plane")

	// Tenantry's own refusal, not the host's Pod Security (which would
	// refuse a hostPath volume too).
	syncertest.ExpectHostRejected(t, tenant, hostile.Namespace, hostile.Name, "volume root is of type hostPath")
	expectNoHostCopy(t, "tenant-2", hostile)
	syncertest.ExpectHostRejected(t, tenant, cloner.Namespace, cloner.Name, "volume src is of type gitRepo")
	expectNoHostCopy(t, "tenant-2", cloner)

	eventually(t, 20*time.Second, "the picker's host Pod, with a claim template that picks no volume", func(ctx context.Context) (bool, error) {
		var host corev1.Pod
		if err := shared.Host.Get(ctx, shared.HostKey("tenant-2", volumePicker.Namespace, volumePicker.Name), &host); err != nil {
			return false, err
		}
		template := host.Spec.Volumes[0].Ephemeral.VolumeClaimTemplate
		return template.Spec.VolumeName == "" && template.Spec.Selector == nil && template.Labels == nil,
			fmt.Errorf("volumeName %q, labels %v", template.Spec.VolumeName, template.Labels)
	})
	syncertest.ExpectStripped(t, tenant, volumePicker.Namespace, volumePicker.Name, "volume scratch's volumeName",
		"volume scratch's claim template labels and annotations")
}
