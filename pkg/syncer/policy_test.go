package syncer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
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
			Tolerations:       []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			NodeSelector:      map[string]string{"node-role.kubernetes.io/control-plane": ""},
			Containers:        []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	hostile := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("hostpath")},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app", VolumeMounts: []corev1.VolumeMount{{Name: "root", MountPath: "/host"}}}},
			Volumes:    []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
		},
	}
	for _, p := range []*corev1.Pod{greedy, hostile} {
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
	if host.Spec.PriorityClassName != "" || (host.Spec.Priority != nil && *host.Spec.Priority != 0) || len(host.Spec.NodeSelector) != 0 {
		t.Errorf("host Pod: priority class %q (%v), node selector %v; want the host's defaults", host.Spec.PriorityClassName, host.Spec.Priority, host.Spec.NodeSelector)
	}
	for _, tol := range host.Spec.Tolerations {
		if tol.Key == "" {
			t.Errorf("host Pod tolerates every taint: %v", host.Spec.Tolerations)
		}
	}
	eventually(t, 10*time.Second, "a Normal HostStripped Event naming what was left out", func(context.Context) (bool, error) {
		events := eventsAbout(t, tenant, greedy.Namespace, greedy.Name, syncer.ReasonHostStripped)
		for _, e := range events {
			if e.Type == corev1.EventTypeNormal && strings.Contains(e.Note, "priorityClassName system-node-critical") &&
				strings.Contains(e.Note, "toleration of every taint") && strings.Contains(e.Note, "node-role.kubernetes.io/control-plane") {
				return len(events) == 1, fmt.Errorf("%d events", len(events))
			}
		}
		return false, fmt.Errorf("events %v", events)
	})

	expectHostRejectedEvent(t, tenant, hostile.Namespace, hostile.Name, "hostPath")
	expectNoHostCopy(t, "tenant-2", hostile)
}

// Every host namespace of a tenant gets the isolation NetworkPolicy: its
// Pods take traffic only from the same VirtualCluster's Pods. One deleted
// or changed by hand is restored, and a settled one is not rewritten.
func TestHostNamespacesAreIsolated(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	ns := createNamespace(t, tenant, "isolated")
	cm := configMap(unique("c"), nil)
	cm.Namespace = ns.Name
	if err := tenant.Create(ctx, cm); err != nil { // makes the host namespace
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: hostNS("tenant-1", ns.Name), Name: syncer.IsolationPolicyName}
	var policy networkingv1.NetworkPolicy
	expectPolicy := func(what string) {
		t.Helper()
		eventually(t, 20*time.Second, what, func(ctx context.Context) (bool, error) {
			if err := shared.Host.Get(ctx, key, &policy); err != nil {
				return false, err
			}
			from := policy.Spec.Ingress
			ok := len(policy.Spec.PolicyTypes) == 1 && policy.Spec.PolicyTypes[0] == networkingv1.PolicyTypeIngress &&
				len(from) == 1 && len(from[0].From) == 2 && from[0].From[0].NamespaceSelector != nil &&
				from[0].From[0].NamespaceSelector.MatchLabels[syncer.LabelCluster] == "tenant-1" &&
				from[0].From[1].NamespaceSelector != nil && len(from[0].From[1].NamespaceSelector.MatchExpressions) == 1 &&
				from[0].From[1].NamespaceSelector.MatchExpressions[0].Operator == metav1.LabelSelectorOpDoesNotExist
			return ok, fmt.Errorf("policy %+v", policy.Spec)
		})
	}
	expectPolicy("the isolation NetworkPolicy in the host namespace")
	settled := policy.ResourceVersion

	policy.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}} // allow everything
	if err := shared.Host.Update(ctx, &policy); err != nil {
		t.Fatal(err)
	}
	expectPolicy("the isolation NetworkPolicy restored after an edit")
	if err := shared.Host.Delete(ctx, &policy); err != nil {
		t.Fatal(err)
	}
	expectPolicy("the isolation NetworkPolicy restored after a deletion")
	settled = policy.ResourceVersion
	// A policy rewritten on every event would show a new resourceVersion
	// within moments (the patroller runs every 300 ms here).
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := shared.Host.Get(ctx, key, &policy); err != nil {
			return false, err
		}
		return policy.ResourceVersion != settled, nil
	})
	if err == nil {
		t.Fatalf("the settled policy was rewritten: resourceVersion %s, then %s", settled, policy.ResourceVersion)
	}
}
