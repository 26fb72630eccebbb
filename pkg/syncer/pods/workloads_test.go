package pods_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer/pods"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A Deployment in a tenant becomes Available as on a cluster of its own:
// the tenant's controller-manager makes its Pods, Tenantry runs them in the
// host, where the scheduler puts them on nodes and the kubelet (kwok) runs
// them, and their status comes back up. The host Service of the tenant's
// Service routes to them.
func TestDeploymentBecomesAvailable(t *testing.T) {
	useWorld(t)
	tenant := shared.Tenants["tenant-1"]
	deploy, svc := createServedDeployment(t, tenant, "shop", 2)
	expectAvailable(t, tenant, deploy, 2)
	ips := expectPodsRunInHost(t, "tenant-1", tenant, deploy, 2)
	eventually(t, 30*time.Second, fmt.Sprintf("the host Service's endpoints are the Pods' IPs %v", ips), func(ctx context.Context) (bool, error) {
		var list discoveryv1.EndpointSliceList
		if err := shared.Host.List(ctx, &list, client.InNamespace(hostNS("tenant-1", "default")),
			client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
			return false, err
		}
		got := readyAddresses(list.Items)
		return fmt.Sprint(got) == fmt.Sprint(ips), fmt.Errorf("endpoints %v", got)
	})
}

// A tenant's API server restarts under its controller-manager and under
// Tenantry: both reconnect, and a Deployment scaled afterwards becomes
// Available again with its new Pods running in the host.
func TestDeploymentScalesAfterTenantAPIServerRestart(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	deploy := deployment(unique("api"), 1)
	if err := tenant.Create(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), deploy) })
	expectAvailable(t, tenant, deploy, 1)

	cp := shared.Env.Tenants[1]
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "Deployment scaled to 3", func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(deploy), &d); err != nil {
			return false, err
		}
		d.Spec.Replicas = ptr.To[int32](3)
		err := tenant.Update(ctx, &d)
		return err == nil, err
	})
	expectAvailable(t, tenant, deploy, 3)
	expectPodsRunInHost(t, "tenant-2", tenant, deploy, 3)
}

// createServedDeployment creates, in the tenant's namespace default, a
// Deployment of n Pods and a Service in front of them, both deleted when
// the test ends (their Pods would keep running in the host for the other
// tests).
func createServedDeployment(t *testing.T, tenant client.Client, prefix string, n int32) (*appsv1.Deployment, *corev1.Service) {
	t.Helper()
	deploy := deployment(unique(prefix), n)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: deploy.Name},
		Spec: corev1.ServiceSpec{
			Selector: deploy.Spec.Selector.MatchLabels,
			Ports:    []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, o := range []client.Object{deploy, svc} {
		if err := tenant.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tenant.Delete(context.Background(), o) })
	}
	return deploy, svc
}

// deployment is a Deployment of n nginx Pods in namespace default.
func deployment(name string, n int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
			},
		},
	}
}

// expectAvailable waits until the tenant's Deployment is Available with n
// available replicas.
func expectAvailable(t *testing.T, tenant client.Client, deploy *appsv1.Deployment, n int32) {
	t.Helper()
	eventually(t, 60*time.Second, fmt.Sprintf("Deployment %s %d/%d Available in the tenant", deploy.Name, n, n), func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(deploy), &d); err != nil {
			return false, err
		}
		available := false
		for _, c := range d.Status.Conditions {
			available = available || c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue
		}
		return available && d.Status.AvailableReplicas == n, fmt.Errorf("%d/%d available", d.Status.AvailableReplicas, n)
	})
}

// expectPodsRunInHost checks that each of the Deployment's n Pods runs in
// the host on a kwok node, and that the tenant sees the host's node and IP.
// It returns the Pods' IPs, sorted.
func expectPodsRunInHost(t *testing.T, cluster string, tenant client.Client, deploy *appsv1.Deployment, n int) []string {
	t.Helper()
	var podList corev1.PodList
	if err := tenant.List(t.Context(), &podList, client.InNamespace(deploy.Namespace), client.MatchingLabels(deploy.Spec.Selector.MatchLabels)); err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, p := range podList.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		var host corev1.Pod
		if err := shared.Host.Get(t.Context(), shared.HostKey(cluster, p.Namespace, p.Name), &host); err != nil {
			t.Fatalf("host copy of Pod %s: %v", p.Name, err)
		}
		if !strings.HasPrefix(host.Spec.NodeName, tenantrytest.NodeNamePrefix) || host.Status.Phase != corev1.PodRunning {
			t.Errorf("host Pod %s: node %q, phase %q; want Running on a kwok node", host.Name, host.Spec.NodeName, host.Status.Phase)
		}
		if p.Spec.NodeName != host.Spec.NodeName || p.Status.PodIP != host.Status.PodIP {
			t.Errorf("tenant Pod %s on %q with IP %q, its host Pod on %q with %q", p.Name, p.Spec.NodeName, p.Status.PodIP, host.Spec.NodeName, host.Status.PodIP)
		}
		ips = append(ips, host.Status.PodIP)
		t.Logf("Pod %s runs on %s with IP %s", p.Name, p.Spec.NodeName, p.Status.PodIP)
	}
	if len(ips) != n {
		t.Fatalf("%d running Pods, want %d", len(ips), n)
	}
	slices.Sort(ips)
	return ips
}

// readyAddresses are the sorted addresses of the ready endpoints in slices.
func readyAddresses(items []discoveryv1.EndpointSlice) []string {
	var addrs []string
	for _, s := range items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				addrs = append(addrs, e.Addresses...)
			}
		}
	}
	slices.Sort(addrs)
	return addrs
}

// A host Pod deleted by hand is not run again: its tenant Pod ends Failed,
// saying so, and the tenant's Deployment replaces it, as on any cluster.
func TestDeletedHostPodFailsItsTenantPod(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	deploy := deployment(unique("lost"), 1)
	if err := tenant.Create(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), deploy) })
	expectAvailable(t, tenant, deploy, 1)
	var podList corev1.PodList
	if err := tenant.List(ctx, &podList, client.InNamespace("default"), client.MatchingLabels(deploy.Spec.Selector.MatchLabels)); err != nil || len(podList.Items) != 1 {
		t.Fatalf("%d Pods (%v), want 1", len(podList.Items), err)
	}
	victim := podList.Items[0]
	hostKey := shared.HostKey("tenant-1", victim.Namespace, victim.Name)
	if err := shared.Host.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: hostKey.Namespace, Name: hostKey.Name}}); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "the tenant Pod Failed because its host Pod was deleted", func(ctx context.Context) (bool, error) {
		var p corev1.Pod
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(&victim), &p); err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == pods.ReasonHostPodDeleted,
			fmt.Errorf("phase %q, reason %q, message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	eventually(t, 60*time.Second, "a replacement Pod Running", func(ctx context.Context) (bool, error) {
		var list corev1.PodList
		if err := tenant.List(ctx, &list, client.InNamespace("default"), client.MatchingLabels(deploy.Spec.Selector.MatchLabels)); err != nil {
			return false, err
		}
		for _, p := range list.Items {
			if p.Name != victim.Name && p.Status.Phase == corev1.PodRunning {
				return true, nil
			}
		}
		return false, fmt.Errorf("%d Pods", len(list.Items))
	})
	expectAvailable(t, tenant, deploy, 1)
	if err := shared.Host.Get(ctx, hostKey, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the deleted host Pod was made again: %v", err)
	}
}

// Each Pod of a Job runs once in the host: three completions, three host
// Pods.
func TestJobPodsRunOnce(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("thrice")},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](3),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "work", Image: "busybox"}},
			}},
		},
	}
	if err := tenant.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the Job Complete with 3 succeeded", func(ctx context.Context) (bool, error) {
		var j batchv1.Job
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
			return false, err
		}
		complete := slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
			return c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue
		})
		return complete && j.Status.Succeeded == 3, fmt.Errorf("succeeded %d, failed %d", j.Status.Succeeded, j.Status.Failed)
	})
	var hostPods corev1.PodList
	if err := shared.Host.List(ctx, &hostPods, client.InNamespace(hostNS("tenant-2", "default")),
		client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		t.Fatal(err)
	}
	if len(hostPods.Items) != 3 {
		t.Fatalf("%d host Pods for a Job of 3 completions, want 3", len(hostPods.Items))
	}
}

// A host node drained (cordoned, its Pods evicted) moves the tenant's Pods:
// each evicted one ends Failed in the tenant and its replacement runs on
// another node.
func TestHostDrainMovesTenantPods(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	deploy := deployment(unique("drained"), 2)
	if err := tenant.Create(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), deploy) })
	expectAvailable(t, tenant, deploy, 2)

	drained := tenantrytest.NodeNamePrefix + "1"
	setUnschedulable(t, drained, true)
	t.Cleanup(func() { setUnschedulable(t, drained, false) })
	var hostPods corev1.PodList
	if err := shared.Host.List(ctx, &hostPods, client.InNamespace(hostNS("tenant-2", "default")),
		client.MatchingLabels(deploy.Spec.Selector.MatchLabels)); err != nil {
		t.Fatal(err)
	}
	evicted := map[string]bool{} // by name, the same in tenant and host
	for _, p := range hostPods.Items {
		if p.Spec.NodeName != drained {
			continue
		}
		eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		if err := shared.Host.SubResource("eviction").Create(ctx, &p, eviction); err != nil {
			t.Fatalf("evicting host Pod %s: %v", p.Name, err)
		}
		evicted[p.Name] = true
	}
	t.Logf("evicted %d host Pods from %s", len(evicted), drained)

	// Each evicted Pod ends Failed in the tenant, saying why; later the
	// tenant's PodGC may remove it with its virtual node, as a cluster
	// removes the Pods of a node it lost.
	failed := map[string]string{}
	eventually(t, 60*time.Second, "every evicted Pod Failed, and the Deployment's Pods Running off the drained node", func(ctx context.Context) (bool, error) {
		var podList corev1.PodList
		if err := tenant.List(ctx, &podList, client.InNamespace("default"), client.MatchingLabels(deploy.Spec.Selector.MatchLabels)); err != nil {
			return false, err
		}
		running := 0
		for _, p := range podList.Items {
			switch {
			case p.Status.Phase == corev1.PodFailed && evicted[p.Name]:
				failed[p.Name] = p.Status.Reason + ": " + p.Status.Message
				// The eviction shows when the host Pod's last status
				// reached the tenant before kwok removed it, a plain
				// deletion otherwise.
				if p.Status.Reason != pods.ReasonHostPodEvicted && p.Status.Reason != pods.ReasonHostPodDeleted {
					t.Errorf("tenant Pod %s Failed with reason %q", p.Name, p.Status.Reason)
				}
			case p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != drained:
				running++
			}
		}
		return running == 2 && len(failed) == len(evicted), fmt.Errorf("%d Running elsewhere, %d of %d evicted seen Failed", running, len(failed), len(evicted))
	})
	for name, why := range failed {
		t.Logf("tenant Pod %s Failed: %s", name, why)
	}
	expectAvailable(t, tenant, deploy, 2)
}

// setUnschedulable cordons or uncordons a host node.
func setUnschedulable(t *testing.T, node string, unschedulable bool) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := shared.Host.Patch(context.Background(), n, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		t.Fatalf("setting %s unschedulable=%t: %v", node, unschedulable, err)
	}
}

// A Pod evicted in the tenant is evicted in the host, where the host's
// PodDisruptionBudget holds: the tenant hears that the host refuses, its
// Deployment replaces the Pod, and then the host lets the eviction through.
func TestTenantEvictionHonoursHostDisruptionBudget(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	deploy := deployment(unique("budget"), 2)
	if err := tenant.Create(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), deploy) })
	expectAvailable(t, tenant, deploy, 2)

	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: hostNS("tenant-1", "default"), Name: deploy.Name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector:     deploy.Spec.Selector,
		},
	}
	if err := shared.Host.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Host.Delete(context.Background(), pdb) })
	eventually(t, 30*time.Second, "the host's budget allows no disruption", func(ctx context.Context) (bool, error) {
		var got policyv1.PodDisruptionBudget
		if err := shared.Host.Get(ctx, client.ObjectKeyFromObject(pdb), &got); err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 2 && got.Status.DisruptionsAllowed == 0,
			fmt.Errorf("%d healthy, %d disruptions allowed", got.Status.CurrentHealthy, got.Status.DisruptionsAllowed)
	})

	var podList corev1.PodList
	if err := tenant.List(ctx, &podList, client.InNamespace("default"), client.MatchingLabels(deploy.Spec.Selector.MatchLabels)); err != nil {
		t.Fatal(err)
	}
	victim := podList.Items[0]
	if err := tenant.SubResource("eviction").Create(ctx, &victim, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: victim.Namespace, Name: victim.Name},
	}); err != nil {
		t.Fatalf("the tenant, which has no budget, refused the eviction: %v", err)
	}
	event := syncertest.ExpectHostRejected(t, tenant, victim.Namespace, victim.Name, "disruption budget")
	t.Logf("tenant event: %s", event.Note)

	eventually(t, 60*time.Second, "the evicted Pod gone from tenant and host, once its replacement runs", func(ctx context.Context) (bool, error) {
		errTenant := tenant.Get(ctx, client.ObjectKeyFromObject(&victim), &corev1.Pod{})
		errHost := shared.Host.Get(ctx, shared.HostKey("tenant-1", victim.Namespace, victim.Name), &corev1.Pod{})
		return apierrors.IsNotFound(errTenant) && apierrors.IsNotFound(errHost), fmt.Errorf("tenant: %v; host: %v", errTenant, errHost)
	})
	expectAvailable(t, tenant, deploy, 2)
}

// A tenant Pod that a finalizer holds (a Job's, whose controller counts
// how the Pod ended before it lets it go) ends Failed once its host Pod is
// gone, as a kubelet ends a Pod it stops, keeping the DisruptionTarget
// condition of its eviction: a Job's pod failure policy reads it there.
func TestEvictedPodHeldByAFinalizerEndsFailed(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	const hold = "example.com/hold"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("held"), Finalizers: []string{hold}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if err := tenant.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	release := func(ctx context.Context) error {
		var p corev1.Pod
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return client.IgnoreNotFound(err)
		}
		patch := client.MergeFrom(p.DeepCopy())
		p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == hold })
		return tenant.Patch(ctx, &p, patch)
	}
	t.Cleanup(func() { _ = release(context.Background()) })
	eventually(t, 30*time.Second, "tenant Pod "+pod.Name+" running", func(ctx context.Context) (bool, error) {
		var p corev1.Pod
		err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), &p)
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})

	if err := tenant.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the host Pod gone and the tenant Pod Failed, its eviction's condition kept", func(ctx context.Context) (bool, error) {
		errHost := shared.Host.Get(ctx, shared.HostKey("tenant-1", pod.Namespace, pod.Name), &corev1.Pod{})
		var p corev1.Pod
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, err
		}
		evicted := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "EvictionByEvictionAPI"
		})
		running := slices.ContainsFunc(p.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.State.Terminated == nil })
		return apierrors.IsNotFound(errHost) && p.Status.Phase == corev1.PodFailed && evicted && !running,
			fmt.Errorf("host: %v; tenant phase %s, conditions %+v, containers %+v", errHost, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the tenant Pod gone once released", func(ctx context.Context) (bool, error) {
		err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
