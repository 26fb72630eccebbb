package syncer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
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
	expectStrippedEvent(t, tenant, greedy.Namespace, greedy.Name, "priorityClassName system-node-critical",
		"toleration of every taint", "node-role.kubernetes.io/control-plane", "schedulerName tenant-scheduler",
		"runtimeClassName tenant-runtime", "topologySpreadConstraint on node-role.kubernetes.io/control-plane")

	// Tenantry's own refusal, not the host's Pod Security (which would
	// refuse a hostPath volume too).
	expectHostRejectedEvent(t, tenant, hostile.Namespace, hostile.Name, "volume root is of type hostPath")
	expectNoHostCopy(t, "tenant-2", hostile)
	expectHostRejectedEvent(t, tenant, cloner.Namespace, cloner.Name, "volume src is of type gitRepo")
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
	expectStrippedEvent(t, tenant, volumePicker.Namespace, volumePicker.Name, "volume scratch's volumeName",
		"volume scratch's claim template labels and annotations")
}

// A Service that claims host addresses or the host's load balancer is
// synced without them, and the tenant told.
func TestHostPolicyStripsServiceAddresses(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("claimer")},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerIP:    "203.0.113.7",
			LoadBalancerClass: ptr.To("example.com/internal"),
			ExternalIPs:       []string{"203.0.113.8"},
			Ports:             []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if err := tenant.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), svc) })
	eventually(t, 20*time.Second, "the host Service without the tenant's addresses", func(ctx context.Context) (bool, error) {
		var host corev1.Service
		if err := shared.Host.Get(ctx, shared.HostKey("tenant-2", svc.Namespace, svc.Name), &host); err != nil {
			return false, err
		}
		return host.Spec.LoadBalancerIP == "" && host.Spec.LoadBalancerClass == nil && len(host.Spec.ExternalIPs) == 0,
			fmt.Errorf("loadBalancerIP %q, class %v, externalIPs %v", host.Spec.LoadBalancerIP, host.Spec.LoadBalancerClass, host.Spec.ExternalIPs)
	})
	expectStrippedEvent(t, tenant, svc.Namespace, svc.Name,
		"loadBalancerIP 203.0.113.7", "externalIPs 203.0.113.8", "loadBalancerClass example.com/internal")
}

// expectStrippedEvent waits for the one Normal HostStripped Event of a
// tenant object, naming each of want.
func expectStrippedEvent(t *testing.T, tenant client.Client, ns, name string, want ...string) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("one Normal HostStripped Event on %s/%s naming %q", ns, name, want), func(context.Context) (bool, error) {
		events := eventsAbout(t, tenant, ns, name, syncer.ReasonHostStripped)
		for _, e := range events {
			if e.Type == corev1.EventTypeNormal && !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(e.Note, w) }) {
				return len(events) == 1, fmt.Errorf("%d events", len(events))
			}
		}
		return false, fmt.Errorf("events %v", events)
	})
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
	// A rule added beside Tenantry's, that lets everyone in, goes too.
	policy.Spec.Ingress = append(policy.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
	if err := shared.Host.Update(ctx, &policy); err != nil {
		t.Fatal(err)
	}
	expectPolicy("the isolation NetworkPolicy restored after a rule was added")
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
