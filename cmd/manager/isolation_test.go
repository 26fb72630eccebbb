package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// TestHostPolicyII runs the management app, with every built-in syncer and
// the default policy, against a host that schedules Pods on simulated
// nodes (and binds volumes) and two tenants that run their own
// kube-controller-manager: what the host policy's budget, storage and
// metadata rules, and the node heartbeat of a paused tenant, do on real
// control planes.
func TestHostPolicyII(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{
		Tenants:                 3,
		HostNodes:               1,
		TenantControllerManager: true,
		HostCRDDirectoryPaths:   []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	host := newHostClient(t, env.Host)
	data, err := env.Host.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	// A process of its own: one management app per process, as in a
	// cluster.
	startManager(t, data)
	register := func(t *testing.T, name string, cp *tenantrytest.ControlPlane, policy *tenantryv1alpha1.HostPolicy) client.Client {
		t.Helper()
		registerTenant(t, host, name, cp, policy)
		expectReady(t, host, name, metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
		return newHostClient(t, cp)
	}

	t.Run("a paused tenant keeps its nodes Ready and its Pods running", func(t *testing.T) {
		t.Parallel()
		tenant := register(t, "dozing", env.Tenants[0], nil)
		ctx := t.Context()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sleeper"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err := tenant.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "the tenant Pod running on a Ready virtual node", func(ctx context.Context) (bool, error) {
			if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return false, err
			}
			return pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName != "", fmt.Errorf("phase %s on %q", pod.Status.Phase, pod.Spec.NodeName)
		})
		node := pod.Spec.NodeName
		eventually(t, 30*time.Second, "the virtual node's Lease", func(ctx context.Context) (bool, error) {
			err := tenant.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, &coordinationv1.Lease{})
			return err == nil, err
		})
		setPaused(t, host, "dozing", true)
		expectReady(t, host, "dozing", metav1.ConditionFalse, tenantryv1alpha1.ReasonPaused)
		// The tenant's node lifecycle controller marks a node Unknown 50
		// seconds after its Lease was last renewed: two minutes cover
		// that twice over.
		renewals := map[string]bool{}
		tenantrytest.Consistently(t, 2*time.Minute, 5*time.Second, "the paused tenant's node Ready and its Pod running", func(ctx context.Context) (bool, error) {
			var n corev1.Node
			if err := tenant.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
				return false, err
			}
			if c := nodeReady(&n); c == nil || c.Status != corev1.ConditionTrue {
				return false, fmt.Errorf("virtual node %s: Ready %+v", node, c)
			}
			var lease coordinationv1.Lease
			if err := tenant.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, &lease); err != nil {
				return false, err
			}
			renewals[lease.Spec.RenewTime.String()] = true
			if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return false, err
			}
			return pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp.IsZero(),
				fmt.Errorf("the Pod: phase %s, deleted %v", pod.Status.Phase, pod.DeletionTimestamp)
		})
		if len(renewals) < 6 {
			t.Errorf("the node Lease was renewed %d times in 2 minutes while paused; want every 10 seconds", len(renewals))
		}
		var hostPods corev1.PodList
		if err := host.List(ctx, &hostPods, client.InNamespace(syncer.HostNamespace("dozing", "default"))); err != nil || len(hostPods.Items) != 1 {
			t.Fatalf("host Pods of the paused tenant: %v, %d; want its one Pod kept", err, len(hostPods.Items))
		}
		setPaused(t, host, "dozing", false)
		expectReady(t, host, "dozing", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
	})

	t.Run("a tenant the host trusts gets the Pod Security level it is given", func(t *testing.T) {
		t.Parallel()
		tenant := register(t, "trusted", env.Tenants[2], &tenantryv1alpha1.HostPolicy{
			Pods: &tenantryv1alpha1.PodPolicy{PodSecurityLevel: "privileged"},
		})
		ctx := t.Context()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "on-host-network"},
			Spec:       corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err := tenant.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		// baseline, the default, refuses a Pod on the host's network.
		eventually(t, 30*time.Second, "the host-network Pod copied to a privileged host namespace", func(ctx context.Context) (bool, error) {
			var ns corev1.Namespace
			if err := host.Get(ctx, client.ObjectKey{Name: syncer.HostNamespace("trusted", "default")}, &ns); err != nil {
				return false, err
			}
			if level := ns.Labels["pod-security.kubernetes.io/enforce"]; level != "privileged" {
				return false, fmt.Errorf("the host namespace enforces %q", level)
			}
			return true, host.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: pod.Name}, &corev1.Pod{})
		})
	})

	t.Run("the budget holds over all host namespaces, exactly, and storage and metadata follow the policy", func(t *testing.T) {
		t.Parallel()
		tenant := register(t, "budgeted", env.Tenants[1], &tenantryv1alpha1.HostPolicy{
			Budget: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("3"), corev1.ResourceRequestsStorage: resource.MustParse("1Gi")},
		})
		ctx := t.Context()
		for _, ns := range []string{"team-a", "team-b"} {
			if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
		}
		// Five Pods at once, over two namespaces: three fit.
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: []string{"team-a", "team-b"}[i%2], Name: fmt.Sprintf("p%d", i),
						Annotations: map[string]string{"io.kubernetes.cri-o.Devices": "/dev/kvm", "team.example.com/owner": "blue"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
				}
				if err := tenant.Create(ctx, pod); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		hostPods := func(ctx context.Context) ([]corev1.Pod, error) {
			var all []corev1.Pod
			for _, ns := range []string{"team-a", "team-b"} {
				var list corev1.PodList
				if err := host.List(ctx, &list, client.InNamespace(syncer.HostNamespace("budgeted", ns))); err != nil {
					return nil, err
				}
				all = append(all, list.Items...)
			}
			return all, nil
		}
		// Which three get in is the race's: a Pod admitted whose host
		// namespace is not ready yet gives its room back until it is, and
		// may find it taken (refused once, then let in, while another is
		// refused). The two left out have each been told why.
		eventually(t, 30*time.Second, "three host Pods, the two other tenant Pods refused on the budget's pods", func(ctx context.Context) (bool, error) {
			pods, err := hostPods(ctx)
			if err != nil {
				return false, err
			}
			copied := map[string]bool{}
			for _, p := range pods {
				copied[p.Name] = true
			}
			refused := 0
			for _, ns := range []string{"team-a", "team-b"} {
				var events eventsv1.EventList
				if err := tenant.List(ctx, &events, client.InNamespace(ns)); err != nil {
					return false, err
				}
				seen := map[string]bool{}
				for _, e := range events.Items {
					if e.Reason == syncer.ReasonHostRejected && strings.Contains(e.Note, "pods would be 4, over 3") &&
						strings.Contains(e.Note, "spec.hostPolicy.budget") && !seen[e.Regarding.Name] && !copied[e.Regarding.Name] {
						seen[e.Regarding.Name] = true
						refused++
					}
				}
			}
			return len(pods) == 3 && refused == 2, fmt.Errorf("%d host Pods, %d of the others refused", len(pods), refused)
		})
		// Held, not just reached.
		tenantrytest.Consistently(t, 5*time.Second, 500*time.Millisecond, "three host Pods", func(ctx context.Context) (bool, error) {
			pods, err := hostPods(ctx)
			return err == nil && len(pods) == 3, fmt.Errorf("%d host Pods (%v)", len(pods), err)
		})
		pods, _ := hostPods(ctx)
		if a := pods[0].Annotations; a["io.kubernetes.cri-o.Devices"] != "" || a["team.example.com/owner"] != "blue" {
			t.Errorf("host Pod annotations %v: want the unprefixed one left out, the prefixed one copied", a)
		}
		eventually(t, 30*time.Second, "status.budget: 3 of 3 Pods", func(ctx context.Context) (bool, error) {
			var vc tenantryv1alpha1.VirtualCluster
			if err := host.Get(ctx, client.ObjectKey{Name: "budgeted"}, &vc); err != nil {
				return false, err
			}
			b := vc.Status.Budget
			return b != nil && b.Pods == "3/3" && b.Used.Pods().Value() == 3 && b.Used.Name(corev1.ResourceRequestsStorage, resource.BinarySI).IsZero(), fmt.Errorf("budget status %+v", b)
		})
		// One goes: a refused one takes its room.
		gone := pods[0]
		if err := tenant.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: gone.Annotations[syncer.AnnotationTenantNamespace], Name: gone.Name,
		}}, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "a refused Pod made once room is free", func(ctx context.Context) (bool, error) {
			pods, err := hostPods(ctx)
			if err != nil {
				return false, err
			}
			names := map[string]bool{}
			for _, p := range pods {
				names[p.Name] = true
			}
			return len(pods) == 3 && !names[gone.Name], fmt.Errorf("host Pods %v", names)
		})

		// A claim for a pre-made host volume (the empty class) is refused,
		// and the host's free volume stays free; one over the storage
		// budget too.
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "someone-elses-data"},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}},
				StorageClassName:       "",
			},
		}
		if err := host.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
		claim := func(name string, class *string, size string) *corev1.PersistentVolumeClaim {
			c := &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
				Spec: corev1.PersistentVolumeClaimSpec{
					StorageClassName: class,
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
				},
			}
			if err := tenant.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
			return c
		}
		grab := claim("grab", ptr.To(""), "1Gi")
		large := claim("large", nil, "2Gi")
		expectTenantEvent(t, tenant, grab.Namespace, grab.Name, syncer.ReasonHostRejected, "spec.hostPolicy.storage.allowedStorageClasses")
		expectTenantEvent(t, tenant, large.Namespace, large.Name, syncer.ReasonHostRejected, "requests.storage would be 2Gi, over 1Gi")
		if err := host.Get(ctx, client.ObjectKeyFromObject(pv), pv); err != nil || pv.Spec.ClaimRef != nil {
			t.Errorf("the host's free volume: %v, claimed by %v; want it free", err, pv.Spec.ClaimRef)
		}
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(grab), grab); err != nil || grab.Spec.StorageClassName == nil || *grab.Spec.StorageClassName != "" {
			t.Errorf("the refused claim: %v, class %v; want it as the tenant wrote it", err, grab.Spec.StorageClassName)
		}
	})
}

// nodeReady is a node's Ready condition, or nil.
func nodeReady(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// expectTenantEvent waits for an Event of reason on tenant object
// namespace/name whose note says want.
func expectTenantEvent(t *testing.T, tenant client.Client, namespace, name, reason, want string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s Event on %s/%s saying %q", reason, namespace, name, want), func(ctx context.Context) (bool, error) {
		var events eventsv1.EventList
		if err := tenant.List(ctx, &events, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, want) {
				return true, nil
			}
		}
		return false, nil
	})
}
