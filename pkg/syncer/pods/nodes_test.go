package pods_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
)

// stableFor is how long a Deployment's Pods must stay as they are: longer
// than the tenant's PodGC quarantine of Pods on missing nodes (40 s) and its
// node-monitor-grace-period (50 s) together, the loops that virtual nodes
// prevent.
const stableFor = 2 * time.Minute

// A tenant's Deployment keeps exactly its Pods: the tenant sees a Ready
// Node for every host node they run on, so that its PodGC and node
// lifecycle controller leave them alone, as on a cluster of its own.
func TestVirtualNodesKeepPodsAlive(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	deploy, svc := createServedDeployment(t, tenant, "steady", 3)
	expectAvailable(t, tenant, deploy, 3)
	expectVirtualNodesMatchPods(t, "tenant-1")
	// The tenant's own EndpointSlice controller counts Pods on nodes it
	// knows.
	eventually(t, 30*time.Second, "the tenant's EndpointSlices list the 3 Pods as ready", func(ctx context.Context) (bool, error) {
		var list discoveryv1.EndpointSliceList
		if err := tenant.List(ctx, &list, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
			return false, err
		}
		got := readyAddresses(list.Items)
		return len(got) == 3, fmt.Errorf("ready endpoints %v", got)
	})

	pods := func(ctx context.Context) ([]corev1.Pod, error) {
		var list corev1.PodList
		err := tenant.List(ctx, &list, client.InNamespace(deploy.Namespace), client.MatchingLabels(deploy.Spec.Selector.MatchLabels))
		return list.Items, err
	}
	first, err := pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	uids := podUIDs(first)
	nodes := map[string]bool{}
	for _, p := range first {
		nodes[p.Spec.NodeName] = true
	}
	t.Logf("Pods %v on nodes %v; watching them for %s", uids, slices.Sorted(maps.Keys(nodes)), stableFor)

	deadline := time.Now().Add(stableFor)
	ticker := time.NewTicker(2 * time.Second)
	defer ticker.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-ticker.C:
		}
		now, err := pods(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := podUIDs(now); !slices.Equal(got, uids) {
			t.Fatalf("after %s the Deployment's Pods are %v, want %v: the tenant replaced them",
				stableFor-time.Until(deadline), got, uids)
		}
		for _, p := range now {
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				t.Fatalf("Pod %s is %s (deleting: %v): %s %s", p.Name, p.Status.Phase, p.DeletionTimestamp != nil, p.Status.Reason, p.Status.Message)
			}
		}
		for name := range nodes {
			var n corev1.Node
			if err := tenant.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
				t.Fatalf("virtual node %s: %v", name, err)
			}
			if why := notReady(&n); why != "" {
				t.Fatalf("virtual node %s: %s", name, why)
			}
		}
	}
	expectVirtualNodesMatchPods(t, "tenant-1")
}

// A virtual node shows its host node: labels, capacity, allocatable,
// conditions, cordon; no address but its name unless configured. It goes
// when its last Pod goes, and when its host node goes.
func TestVirtualNodeFollowsItsHostNode(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	name := unique("kwok-node-extra")
	if err := shared.Env.Host.AddNode(ctx, name); err != nil {
		t.Fatal(err)
	}
	hostNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	t.Cleanup(func() { _ = shared.Host.Delete(context.Background(), hostNode) })

	first, second := podOn(unique("first"), name), podOn(unique("second"), name)
	for _, p := range []*corev1.Pod{first, second} {
		if err := tenant.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tenant.Delete(context.Background(), p) })
	}
	expectPodRunning(t, tenant, first, name)
	expectPodRunning(t, tenant, second, name)

	eventually(t, 20*time.Second, "the virtual node shows its host node", func(ctx context.Context) (bool, error) {
		var host, virtual corev1.Node
		if err := shared.Host.Get(ctx, client.ObjectKey{Name: name}, &host); err != nil {
			return false, err
		}
		if err := tenant.Get(ctx, client.ObjectKey{Name: name}, &virtual); err != nil {
			return false, err
		}
		want := maps.Clone(host.Labels)
		want[syncer.LabelManagedBy] = syncer.ManagedByValue
		switch {
		case !maps.Equal(virtual.Labels, want):
			return false, fmt.Errorf("labels %v, want %v", virtual.Labels, want)
		case !equality.Semantic.DeepEqual(virtual.Status.Capacity, host.Status.Capacity) ||
			!equality.Semantic.DeepEqual(virtual.Status.Allocatable, host.Status.Allocatable):
			return false, fmt.Errorf("capacity %v allocatable %v, want %v and %v",
				virtual.Status.Capacity, virtual.Status.Allocatable, host.Status.Capacity, host.Status.Allocatable)
		case !equality.Semantic.DeepEqual(virtual.Status.Conditions, host.Status.Conditions):
			return false, fmt.Errorf("conditions %v, want %v", virtual.Status.Conditions, host.Status.Conditions)
		case notReady(&virtual) != "":
			return false, fmt.Errorf("%s", notReady(&virtual))
		}
		wantAddresses := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
		if !equality.Semantic.DeepEqual(virtual.Status.Addresses, wantAddresses) || virtual.Status.DaemonEndpoints.KubeletEndpoint.Port != 0 {
			return false, fmt.Errorf("virtual node shows addresses %v and kubelet port %d; want only its name",
				virtual.Status.Addresses, virtual.Status.DaemonEndpoints.KubeletEndpoint.Port)
		}
		return true, nil
	})
	eventually(t, 10*time.Second, "the virtual node's Lease renewed", func(ctx context.Context) (bool, error) {
		var lease coordinationv1.Lease
		if err := tenant.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: name}, &lease); err != nil {
			return false, err
		}
		return lease.Spec.RenewTime != nil && time.Since(lease.Spec.RenewTime.Time) < time.Minute, fmt.Errorf("renewed %v", lease.Spec.RenewTime)
	})

	setUnschedulable(t, name, true)
	eventually(t, 20*time.Second, "the virtual node cordoned as its host node", func(ctx context.Context) (bool, error) {
		var virtual corev1.Node
		err := tenant.Get(ctx, client.ObjectKey{Name: name}, &virtual)
		return err == nil && virtual.Spec.Unschedulable, err
	})

	// One Pod gone: the other still runs there.
	if err := tenant.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the first Pod gone", func(ctx context.Context) (bool, error) {
		err := tenant.Get(ctx, client.ObjectKeyFromObject(first), &corev1.Pod{})
		return apierrors.IsNotFound(err), err
	})
	if err := tenant.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{}); err != nil {
		t.Fatalf("the virtual node went while a Pod is bound to it: %v", err)
	}

	// The host node gone: its virtual node goes, though a Pod is bound to it.
	if err := shared.Host.Delete(ctx, hostNode); err != nil {
		t.Fatal(err)
	}
	expectTenantNodeGone(t, tenant, name)
	if err := tenant.Delete(ctx, second); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

// A virtual node goes, with its Lease, once no Pod of the tenant is bound
// to it.
func TestVirtualNodeGoesWithItsLastPod(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	name := unique("kwok-node-extra")
	if err := shared.Env.Host.AddNode(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shared.Host.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	pod := podOn(unique("only"), name)
	if err := tenant.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	expectPodRunning(t, tenant, pod, name)
	eventually(t, 20*time.Second, "a virtual node", func(ctx context.Context) (bool, error) {
		err := tenant.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{})
		return err == nil, err
	})
	if err := tenant.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	expectTenantNodeGone(t, tenant, name)
	eventually(t, 10*time.Second, "its Lease gone", func(ctx context.Context) (bool, error) {
		err := tenant.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: name}, &coordinationv1.Lease{})
		return apierrors.IsNotFound(err), err
	})
}

// A Node the tenant made itself is the tenant's: when its name is a host
// node that runs the tenant's Pods, it is never changed or deleted, and the
// tenant is told.
func TestTenantsOwnNodeIsLeftAlone(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	name := unique("kwok-node-extra")
	own := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"mine": "yes"}}}
	if err := tenant.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), own) })
	if err := shared.Env.Host.AddNode(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shared.Host.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	pod := podOn(unique("guest"), name)
	if err := tenant.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), pod) })
	expectPodRunning(t, tenant, pod, name)
	eventually(t, 20*time.Second, "a NodeConflict Warning on the tenant's Node", func(ctx context.Context) (bool, error) {
		for _, e := range syncertest.Events(t, tenant, metav1.NamespaceDefault, name, pods.ReasonNodeConflict) {
			if e.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})
	var n corev1.Node
	if err := tenant.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(n.Labels, own.Labels) || len(n.Status.Capacity) != 0 {
		t.Fatalf("the tenant's own Node was written: labels %v, capacity %v", n.Labels, n.Status.Capacity)
	}
}

// expectVirtualNodesMatchPods checks that the tenant's virtual nodes are
// exactly the nodes its Pods run on in the host.
func expectVirtualNodesMatchPods(t *testing.T, cluster string) {
	t.Helper()
	tenant := shared.Tenants[cluster]
	eventually(t, 30*time.Second, "a virtual node for each node the tenant's Pods run on, and no other", func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := shared.Host.List(ctx, &pods, client.MatchingLabels{syncer.LabelCluster: cluster}); err != nil {
			return false, err
		}
		want := map[string]bool{}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				want[p.Spec.NodeName] = true
			}
		}
		var nodes corev1.NodeList
		if err := tenant.List(ctx, &nodes, client.MatchingLabels{syncer.LabelManagedBy: syncer.ManagedByValue}); err != nil {
			return false, err
		}
		got := map[string]bool{}
		for _, n := range nodes.Items {
			got[n.Name] = true
		}
		return maps.Equal(got, want), fmt.Errorf("virtual nodes %v, host Pods on %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	})
}

func expectTenantNodeGone(t *testing.T, tenant client.Client, name string) {
	t.Helper()
	eventually(t, 30*time.Second, "virtual node "+name+" gone", func(ctx context.Context) (bool, error) {
		err := tenant.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{})
		return apierrors.IsNotFound(err), err
	})
}

// expectPodRunning waits until the tenant Pod runs on node ("": any).
func expectPodRunning(t *testing.T, tenant client.Client, pod *corev1.Pod, node string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("Pod %s Running on %s", pod.Name, node), func(ctx context.Context) (bool, error) {
		var p corev1.Pod
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, err
		}
		return (node == "" || p.Spec.NodeName == node) && p.Status.Phase == corev1.PodRunning, fmt.Errorf("on %q, %s", p.Spec.NodeName, p.Status.Phase)
	})
}

// podOn is a Pod in namespace default that the host schedules on node.
func podOn(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers:   []corev1.Container{{Name: "app", Image: "nginx"}},
		},
	}
}

// notReady says why a node is not Ready or carries a taint that evicts, or
// "" if neither.
func notReady(n *corev1.Node) string {
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	}
	if !ready {
		return fmt.Sprintf("not Ready: %v", n.Status.Conditions)
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoExecute {
			return "tainted " + taint.ToString()
		}
	}
	return ""
}

func podUIDs(pods []corev1.Pod) []types.UID {
	var uids []types.UID
	for _, p := range pods {
		uids = append(uids, p.UID)
	}
	slices.Sort(uids)
	return uids
}
