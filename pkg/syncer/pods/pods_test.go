package pods

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// scheduledPod is a tenant Pod as the host left it: bound, scheduled,
// running, with the given extra conditions.
func scheduledPod(conditions ...corev1.PodCondition) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       corev1.PodSpec{NodeName: "kwok-node-1", Containers: []corev1.Container{{Name: "web"}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: append([]corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			}, conditions...),
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		},
	}
}

// runOnTenant runs f on a fake tenant client holding pod, and returns the
// Pod as stored afterwards.
func runOnTenant(t *testing.T, pod *corev1.Pod, f func(context.Context, client.Client, client.Object) error) *corev1.Pod {
	t.Helper()
	c := fake.NewClientBuilder().WithObjects(pod).WithStatusSubresource(pod).Build()
	stored := &corev1.Pod{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), stored); err != nil {
		t.Fatal(err)
	}
	if err := f(t.Context(), c, stored); err != nil {
		t.Fatal(err)
	}
	after := &corev1.Pod{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), after); err != nil {
		t.Fatal(err)
	}
	return after
}

func TestLifecycleCreated(t *testing.T) {
	unscheduled := scheduledPod()
	unscheduled.Spec.NodeName = ""
	ownNode := scheduledPod()
	ownNode.Status = corev1.PodStatus{} // named a node itself; the host never scheduled it
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"scheduled in the host":    {scheduledPod(), true},
		"not yet scheduled":        {unscheduled, false},
		"node named by the tenant": {ownNode, false},
		"refused by its node's kubelet": {func() *corev1.Pod {
			p := scheduledPod()
			p.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: "NodePorts"} // no PodScheduled: the kubelet's refusal
			return p
		}(), true},
	} {
		if got := (lifecycle{}).Created(tc.pod); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestLifecycleLost(t *testing.T) {
	disruption := func(reason string) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason, Message: "by the host"}
	}
	for name, tc := range map[string]struct {
		pod                    *corev1.Pod
		wantReason, wantInText string
	}{
		"deleted by hand": {scheduledPod(), ReasonHostPodDeleted, "deleted"},
		"evicted":         {scheduledPod(disruption(evictionByEvictionAPI)), ReasonHostPodEvicted, "evicted in the host: by the host"},
		"preempted":       {scheduledPod(disruption(corev1.PodReasonPreemptionByScheduler)), ReasonHostPodPreempted, "preempted"},
		"node tainted":    {scheduledPod(disruption("DeletionByTaintManager")), ReasonHostPodDeleted, "DeletionByTaintManager"},
	} {
		after := runOnTenant(t, tc.pod, lifecycle{}.Lost)
		if after.Status.Phase != corev1.PodFailed || after.Status.Reason != tc.wantReason || !strings.Contains(after.Status.Message, tc.wantInText) {
			t.Errorf("%s: phase %q reason %q message %q; want Failed, %q, saying %q", name, after.Status.Phase, after.Status.Reason, after.Status.Message, tc.wantReason, tc.wantInText)
		}
		if cs := after.Status.ContainerStatuses[0]; cs.State.Terminated == nil || cs.State.Running != nil || cs.Ready {
			t.Errorf("%s: container state %+v, ready %v; want terminated", name, cs.State, cs.Ready)
		}
		for _, c := range after.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status != corev1.ConditionFalse {
				t.Errorf("%s: still Ready", name)
			}
		}
	}

	done := scheduledPod()
	done.Status.Phase = corev1.PodSucceeded
	if after := runOnTenant(t, done, lifecycle{}.Lost); after.Status.Phase != corev1.PodSucceeded {
		t.Errorf("a Pod that had succeeded became %s", after.Status.Phase)
	}
}

func TestLifecycleHostRejected(t *testing.T) {
	pending := scheduledPod()
	pending.Spec.NodeName, pending.Status = "", corev1.PodStatus{Phase: corev1.PodPending}
	reject := func(message string) func(context.Context, client.Client, client.Object) error {
		return func(ctx context.Context, c client.Client, o client.Object) error {
			return lifecycle{}.HostRejected(ctx, c, o, message)
		}
	}
	after := runOnTenant(t, pending, reject("violates PodSecurity"))
	if len(after.Status.Conditions) != 1 {
		t.Fatalf("conditions %+v, want PodScheduled alone", after.Status.Conditions)
	}
	c := after.Status.Conditions[0]
	if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse || c.Reason != syncer.ReasonHostRejected || c.Message != "violates PodSecurity" {
		t.Fatalf("condition %+v", c)
	}
	// A bound Pod's refused update is told by the Event alone.
	if after := runOnTenant(t, scheduledPod(), reject("denied")); after.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Fatalf("a running Pod's PodScheduled became %+v", after.Status.Conditions[0])
	}
}

// The tenant's eviction mark stays on its Pod until the host Pod has one
// of its own, which then wins; other status comes from the host.
func TestPodStatusKeepsTheTenantsEvictionMark(t *testing.T) {
	tenantMark := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: evictionByEvictionAPI, Message: "tenant"}
	hostMark := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonPreemptionByScheduler, Message: "host"}
	for _, tc := range []struct {
		name       string
		tenant     []corev1.PodCondition
		host       []corev1.PodCondition
		wantReason string // of DisruptionTarget; "" for none
	}{
		{"neither", nil, nil, ""},
		{"the tenant's", []corev1.PodCondition{tenantMark}, nil, evictionByEvictionAPI},
		{"the host's", nil, []corev1.PodCondition{hostMark}, corev1.PodReasonPreemptionByScheduler},
		{"both: the host's wins", []corev1.PodCondition{tenantMark}, []corev1.PodCondition{hostMark}, corev1.PodReasonPreemptionByScheduler},
		{"the host's False yields to the tenant's", []corev1.PodCondition{tenantMark}, []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse}}, evictionByEvictionAPI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := scheduledPod(tc.host...)
			host.Status.PodIP = "10.244.1.7"
			after := runOnTenant(t, scheduledPod(tc.tenant...), func(ctx context.Context, c client.Client, tenant client.Object) error {
				_, err := statusCopier(nil)(ctx, c, host, tenant)
				return err
			})
			if after.Status.PodIP != host.Status.PodIP {
				t.Errorf("pod IP %q, want the host's %q", after.Status.PodIP, host.Status.PodIP)
			}
			reason, marks := "", 0
			for _, c := range after.Status.Conditions {
				if c.Type == corev1.DisruptionTarget {
					reason = c.Reason
					marks++
				}
			}
			if reason != tc.wantReason || marks > 1 {
				t.Errorf("DisruptionTarget reason %q (%d conditions), want %q", reason, marks, tc.wantReason)
			}
		})
	}
}

// A kubelet that refuses a Pod for want of a resource says what every
// Pod on the node asks: other tenants' business. The tenant hears which
// resource was short, and no figure.
func TestWithoutNodeUsage(t *testing.T) {
	const refusal = "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000000, used: 1850, capacity: 2000"
	if got, want := withoutNodeUsage("OutOfcpu", refusal), "Pod was rejected: Node didn't have enough resource: cpu"; got != want {
		t.Errorf("OutOfcpu: %q, want %q", got, want)
	}
	const ports = "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
	if got := withoutNodeUsage("NodePorts", ports); got != ports {
		t.Errorf("NodePorts: %q, want it as the kubelet wrote it", got)
	}
}
