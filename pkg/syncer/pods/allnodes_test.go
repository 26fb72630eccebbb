package pods_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
)

// With AllNodes (a VirtualCluster's nodeSync: All), an idle tenant sees
// every host node its node selector allows, and no other; a DaemonSet then
// runs one Pod per such node, each on its host node, and follows a node
// added and a node removed.
func TestAllNodesRunADaemonSet(t *testing.T) {
	// Its own world, started and stopped before the shared one (this file
	// sorts first): its tenants see nodes differently.
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Tenants: 1, HostNodes: 2, TenantControllerManager: true, Syncers: builtin.All(),
		Pods: &pods.Options{AllNodes: true, NodeSelector: map[string]string{"type": "kwok"}},
	})
	ctx := t.Context()
	tenant := w.Tenants["tenant-1"]
	expectNodes := func(why string, want ...string) {
		t.Helper()
		slices.Sort(want)
		eventually(t, time.Minute, why, func(ctx context.Context) (bool, error) {
			var nodes corev1.NodeList
			if err := tenant.List(ctx, &nodes); err != nil {
				return false, err
			}
			var got []string
			for _, n := range nodes.Items {
				if notReady(&n) == "" && n.Labels[syncer.LabelManagedBy] == syncer.ManagedByValue {
					got = append(got, n.Name)
				}
			}
			slices.Sort(got)
			return slices.Equal(got, want), fmt.Errorf("ready virtual nodes %v, want %v", got, want)
		})
	}
	expectNodes("the idle tenant sees both host nodes", "kwok-node-1", "kwok-node-2")

	// A node the selector does not allow is not shown; once it does, it is.
	if err := w.Env.Host.AddNode(ctx, "kwok-node-extra"); err != nil {
		t.Fatal(err)
	}
	expectNodes("a node added to the host is shown", "kwok-node-1", "kwok-node-2", "kwok-node-extra")
	relabel := func(value string) {
		t.Helper()
		var n corev1.Node
		if err := w.Host.Get(ctx, client.ObjectKey{Name: "kwok-node-extra"}, &n); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(n.DeepCopy())
		n.Labels["type"] = value
		if err := w.Host.Patch(ctx, &n, patch); err != nil {
			t.Fatal(err)
		}
	}
	relabel("reserved")
	expectNodes("a host node the selector does not allow goes", "kwok-node-1", "kwok-node-2")
	relabel("kwok")
	expectNodes("and comes back once allowed", "kwok-node-1", "kwok-node-2", "kwok-node-extra")

	labels := map[string]string{"app": "agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}},
			},
		},
	}
	if err := tenant.Create(ctx, ds); err != nil {
		t.Fatal(err)
	}
	expectDaemonPods := func(why string, want ...string) {
		t.Helper()
		slices.Sort(want)
		eventually(t, 2*time.Minute, why, func(ctx context.Context) (bool, error) {
			var pods corev1.PodList
			if err := tenant.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels(labels)); err != nil {
				return false, err
			}
			running := map[string]bool{}
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
					continue
				}
				var host corev1.Pod
				if err := w.Host.Get(ctx, w.HostKey("tenant-1", p.Namespace, p.Name), &host); err != nil {
					return false, err
				}
				if host.Spec.NodeName != p.Spec.NodeName {
					return false, fmt.Errorf("Pod %s is on %s in the tenant and on %s in the host", p.Name, p.Spec.NodeName, host.Spec.NodeName)
				}
				running[p.Spec.NodeName] = true
			}
			got := slices.Sorted(maps.Keys(running))
			if !slices.Equal(got, want) || len(pods.Items) != len(want) {
				return false, fmt.Errorf("%d daemon Pods, Running on %v; want one on each of %v", len(pods.Items), got, want)
			}
			if err := tenant.Get(ctx, client.ObjectKeyFromObject(ds), ds); err != nil {
				return false, err
			}
			st := ds.Status
			return st.DesiredNumberScheduled == int32(len(want)) && st.NumberReady == int32(len(want)),
				fmt.Errorf("DaemonSet desired %d, ready %d", st.DesiredNumberScheduled, st.NumberReady)
		})
	}
	expectDaemonPods("the DaemonSet runs on every node", "kwok-node-1", "kwok-node-2", "kwok-node-extra")

	if err := w.Host.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-extra"}}); err != nil {
		t.Fatal(err)
	}
	expectNodes("a node removed from the host goes", "kwok-node-1", "kwok-node-2")
	expectDaemonPods("the DaemonSet follows", "kwok-node-1", "kwok-node-2")
}
