package pods_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// sharedWorld is a host that schedules and runs Pods on two simulated
// nodes, and two tenants that run their own kube-controller-manager, each
// spawned with every built-in syncer through one hub: what a real
// installation looks like. Tests that need no API server start none.
var sharedWorld = syncertest.Share(syncertest.WorldOptions{
	Tenants: 2, HostNodes: 2, TenantControllerManager: true, Syncers: builtin.All(),
})

// shared is sharedWorld, once useWorld started it.
var shared *syncertest.World

func useWorld(t *testing.T) {
	t.Helper()
	shared = sharedWorld.World(t)
}

func TestMain(m *testing.M) { sharedWorld.Run(m) }

var eventually = tenantrytest.Eventually

func unique(prefix string) string { return prefix + "-" + utilrand.String(5) }

func hostNS(cluster, ns string) string { return syncer.HostNamespace(cluster, ns) }

// createPausePod creates, in tenant's namespace default, a Pod of one
// pause container that asks nodeSelector of its node, and deletes it when
// the test ends.
func createPausePod(t *testing.T, tenant client.Client, name string, nodeSelector map[string]string) *corev1.Pod {
	t.Helper()
	return createPod(t, tenant, name, corev1.PodSpec{NodeSelector: nodeSelector})
}

// createPod creates, in tenant's namespace default, a Pod of spec (of one
// pause container if it has none), and deletes it when the test ends.
func createPod(t *testing.T, tenant client.Client, name string, spec corev1.PodSpec) *corev1.Pod {
	t.Helper()
	if len(spec.Containers) == 0 {
		spec.Containers = []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: spec}
	if err := tenant.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), pod) })
	return pod
}

// expectNoHostCopy checks that tenant object obj of cluster has no copy in
// the host.
func expectNoHostCopy(t *testing.T, cluster string, obj client.Object) {
	t.Helper()
	host := obj.DeepCopyObject().(client.Object)
	err := shared.Host.Get(t.Context(), shared.HostKey(cluster, obj.GetNamespace(), obj.GetName()), host)
	if !apierrors.IsNotFound(err) {
		t.Fatalf("%T %s/%s has a copy in the host: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
}
