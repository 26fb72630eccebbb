package pods_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
