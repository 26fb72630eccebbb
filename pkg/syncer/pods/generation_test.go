package pods_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A tenant Pod's status.observedGeneration follows its own generation
// through spec updates, once the host's kubelet (kwok, as a kubelet of
// 1.34+) has seen the host Pod's matching spec.
func TestPodObservedGenerationFollowsSpecUpdates(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("generations")},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox:1"}}},
	}
	if err := tenant.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	expectObserved := func(why string) {
		t.Helper()
		eventually(t, 30*time.Second, why, func(ctx context.Context) (bool, error) {
			if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return false, err
			}
			return pod.Status.Phase == corev1.PodRunning && pod.Status.ObservedGeneration == pod.Generation,
				fmt.Errorf("phase %s, generation %d, observed %d", pod.Status.Phase, pod.Generation, pod.Status.ObservedGeneration)
		})
	}
	expectObserved("the running Pod's first generation is observed")
	for i := 2; i <= 4; i++ {
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Spec.Containers[0].Image = fmt.Sprintf("busybox:%d", i)
		if err := tenant.Patch(ctx, pod, patch); err != nil {
			t.Fatal(err)
		}
		expectObserved(fmt.Sprintf("generation %d is observed", pod.Generation))
	}
	if pod.Generation != 4 {
		t.Fatalf("tenant Pod at generation %d after three image updates, want 4", pod.Generation)
	}
}
