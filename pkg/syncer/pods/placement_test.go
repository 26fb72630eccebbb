package pods_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A label a tenant sets on its virtual node steers its Pods onto that host
// node, as on a cluster of its own, without reaching the host node: the
// host Pod asks for the node by name. A Pod that no node's labels fit
// stays Pending, and the tenant hears why.
func TestTenantNodeLabelsSteerPods(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	boundNode := func(pod *corev1.Pod) string {
		var node string
		eventually(t, 30*time.Second, "tenant Pod "+pod.Name+" bound", func(ctx context.Context) (bool, error) {
			var p corev1.Pod
			err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), &p)
			node = p.Spec.NodeName
			return err == nil && node != "", err
		})
		return node
	}

	// A Pod anywhere gives the tenant a virtual node, which it labels.
	anchor := createPausePod(t, tenant, unique("anchor"), nil)
	nodeName := boundNode(anchor)
	team := unique("team")
	eventually(t, 20*time.Second, "the tenant's label on its virtual node "+nodeName, func(ctx context.Context) (bool, error) {
		var node corev1.Node
		if err := tenant.Get(ctx, client.ObjectKey{Name: nodeName}, &node); err != nil {
			return false, err
		}
		if node.Labels["team"] == team {
			return true, nil
		}
		patch := client.MergeFrom(node.DeepCopy())
		node.Labels["team"] = team
		return false, tenant.Patch(ctx, &node, patch)
	})

	steered := createPausePod(t, tenant, unique("steered"), map[string]string{"team": team})
	hostKey := client.ObjectKey{Namespace: hostNS("tenant-1", "default"), Name: steered.Name}
	var hostPod corev1.Pod
	eventually(t, 20*time.Second, "host Pod of "+steered.Name, func(ctx context.Context) (bool, error) {
		err := shared.Host.Get(ctx, hostKey, &hostPod)
		return err == nil, err
	})
	if _, asks := hostPod.Spec.NodeSelector["team"]; asks {
		t.Errorf("host Pod's node selector %v: the tenant's label reached the host", hostPod.Spec.NodeSelector)
	}
	var names []string
	if a := hostPod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				names = append(names, f.Values...)
			}
		}
	}
	if !slices.Equal(names, []string{nodeName}) {
		t.Errorf("host Pod asks for nodes %v; want %s, the one the tenant labelled", names, nodeName)
	}
	if got := boundNode(steered); got != nodeName {
		t.Errorf("steered Pod runs on %s; want %s", got, nodeName)
	}
	var hostNode corev1.Node
	if err := shared.Host.Get(ctx, client.ObjectKey{Name: nodeName}, &hostNode); err != nil {
		t.Fatal(err)
	}
	if _, ok := hostNode.Labels["team"]; ok {
		t.Errorf("host node %s has the tenant's label: %v", nodeName, hostNode.Labels)
	}

	unfit := createPausePod(t, tenant, unique("unfit"), map[string]string{"team": team + "-none"})
	eventually(t, 30*time.Second, "FailedScheduling of "+unfit.Name, func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := tenant.List(ctx, &events, client.InNamespace("default")); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == unfit.Name && e.Reason == "FailedScheduling" {
				return true, nil
			}
		}
		return false, fmt.Errorf("no FailedScheduling Event yet")
	})
}

// A Pod the tenant binds to a node by name skips the scheduler, in the
// host too: its host copy is bound to that node, for the node's kubelet to
// admit or refuse, and runs there. One bound to a node the host does not
// have is pinned to it, and waits Pending: the tenant cannot put a Pod
// past the host's scheduler where the host would not.
func TestPodBoundByNameIsBoundInTheHost(t *testing.T) {
	useWorld(t)
	tenant := shared.Tenants["tenant-1"]
	// A host node that takes Pods: the tenant need not see it before.
	var nodes corev1.NodeList
	if err := shared.Host.List(t.Context(), &nodes); err != nil {
		t.Fatal(err)
	}
	var nodeName string
	for _, n := range nodes.Items {
		if !n.Spec.Unschedulable && len(n.Spec.Taints) == 0 {
			nodeName = n.Name
		}
	}
	if nodeName == "" {
		t.Fatalf("no host node of %d takes Pods", len(nodes.Items))
	}

	hostPod := func(pod *corev1.Pod, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
		var h corev1.Pod
		key := client.ObjectKey{Namespace: hostNS("tenant-1", "default"), Name: pod.Name}
		eventually(t, 30*time.Second, "host Pod of "+pod.Name+": "+what, func(ctx context.Context) (bool, error) {
			if err := shared.Host.Get(ctx, key, &h); err != nil {
				return false, err
			}
			return cond(&h), fmt.Errorf("nodeName %q, phase %s", h.Spec.NodeName, h.Status.Phase)
		})
		return &h
	}
	bound := func(name, node string, requests corev1.ResourceList) *corev1.Pod {
		return createPod(t, tenant, name, corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "app", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: requests},
		}}})
	}

	// Asking more CPU than any node has, so that the host's scheduler
	// would leave it Pending: its copy is bound by name, for the node to
	// judge (kwok's simulated kubelet runs what it is given).
	named := bound(unique("named"), nodeName, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100000")})
	hostPod(named, "bound to "+nodeName, func(h *corev1.Pod) bool { return h.Spec.NodeName == nodeName })
	eventually(t, 30*time.Second, "tenant Pod "+named.Name+" on "+nodeName+" with its host Pod's status", func(ctx context.Context) (bool, error) {
		var p corev1.Pod
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(named), &p); err != nil {
			return false, err
		}
		return p.Spec.NodeName == nodeName && p.Status.Phase != corev1.PodPending, fmt.Errorf("on %q, phase %s", p.Spec.NodeName, p.Status.Phase)
	})

	nowhere := bound(unique("nowhere"), "no-such-node", nil)
	h := hostPod(nowhere, "made", func(*corev1.Pod) bool { return true })
	if h.Spec.NodeName != "" {
		t.Errorf("host copy of a Pod bound to a node the host has not: nodeName %q, want none", h.Spec.NodeName)
	}
	if a := h.Spec.Affinity; a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		!slices.ContainsFunc(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, func(term corev1.NodeSelectorTerm) bool {
			return slices.ContainsFunc(term.MatchFields, func(r corev1.NodeSelectorRequirement) bool { return slices.Equal(r.Values, []string{"no-such-node"}) })
		}) {
		t.Errorf("host copy of a Pod bound to a node the host has not: affinity %+v, want it pinned there", h.Spec.Affinity)
	}
	hostPod(nowhere, "unschedulable", func(h *corev1.Pod) bool {
		return slices.ContainsFunc(h.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		})
	})
}
