package testing_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// TestRealControlPlanes starts a host with simulated nodes and a tenant
// with its own controller-manager, and checks what each does as a real
// cluster would: the host schedules and runs Pods, completes Jobs and
// removes deleted Pods; the tenant turns a Deployment into Pods and
// finishes a namespace's deletion.
func TestRealControlPlanes(t *testing.T) {
	logs := t.TempDir()
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 1, HostNodes: 2, TenantControllerManager: true, LogDirectory: logs})
	ctx := t.Context()
	host := newClient(t, env.Host)
	tenant := newClient(t, env.Tenants[0])

	t.Run("the host has Ready kwok nodes", func(t *testing.T) {
		var nodes corev1.NodeList
		if err := host.List(ctx, &nodes); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, n := range nodes.Items {
			names = append(names, n.Name)
			if !nodeReady(&n) {
				t.Errorf("node %s is not Ready: %+v", n.Name, n.Status.Conditions)
			}
		}
		if got := strings.Join(names, " "); got != "kwok-node-1 kwok-node-2" {
			t.Fatalf("host nodes = %q, want kwok-node-1 kwok-node-2", got)
		}
	})

	t.Run("a host Pod is scheduled and runs with an IP of its node", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
		}
		if err := host.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		running := waitPod(t, host, pod, "Running and Ready", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && podReady(p) && p.Status.PodIP != ""
		})
		var node corev1.Node
		if err := host.Get(ctx, client.ObjectKey{Name: running.Spec.NodeName}, &node); err != nil {
			t.Fatalf("the Pod's node %q: %v", running.Spec.NodeName, err)
		}
		cidr := netip.MustParsePrefix(node.Spec.PodCIDR)
		if ip := netip.MustParseAddr(running.Status.PodIP); !cidr.Contains(ip) {
			t.Errorf("Pod IP %s is outside its node's pod CIDR %s", ip, cidr)
		}
		if running.Status.HostIP == "" || running.Status.HostIP != node.Status.Addresses[0].Address {
			t.Errorf("host IP %q, want node %s's address %v", running.Status.HostIP, node.Name, node.Status.Addresses)
		}

		if err := host.Delete(ctx, running); err != nil { // graceful, as kubectl does
			t.Fatal(err)
		}
		tenantrytest.Eventually(t, 30*time.Second, "the deleted Pod removed", func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
			return apierrors.IsNotFound(err), err
		})
	})

	t.Run("a host Job completes", func(t *testing.T) {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "once"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "work", Image: "busybox"}},
			}}},
		}
		if err := host.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		waitJobComplete(t, host, job)
	})

	t.Run("the tenant's controller-manager runs its workloads' controllers", func(t *testing.T) {
		deploy := deployment("default", "app", 2)
		if err := tenant.Create(ctx, deploy); err != nil {
			t.Fatal(err)
		}
		// No scheduler and no nodes in a tenant: the Pods wait for one.
		waitPodCount(t, tenant, "default", deploy.Spec.Selector.MatchLabels, 2)

		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}
		if err := tenant.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "content"}}
		if err := tenant.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		if err := tenant.Delete(ctx, ns); err != nil {
			t.Fatal(err)
		}
		tenantrytest.Eventually(t, 60*time.Second, "the namespace and its content deleted", func(ctx context.Context) (bool, error) {
			err := tenant.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
			return apierrors.IsNotFound(err), err
		})
	})

	t.Run("every process logs to the log directory", func(t *testing.T) {
		for _, name := range []string{
			"host-etcd", "host-kube-apiserver", "host-kube-controller-manager", "host-kube-scheduler", "host-kwok",
			"tenant-1-etcd", "tenant-1-kube-apiserver", "tenant-1-kube-controller-manager",
		} {
			info, err := os.Stat(filepath.Join(logs, name+".log"))
			if err != nil || info.Size() == 0 {
				t.Errorf("log of %s: %v (size %d)", name, err, sizeOf(info))
			}
		}
		if _, err := os.Stat(filepath.Join(logs, "tenant-1-kube-scheduler.log")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a tenant runs a scheduler: %v", err)
		}
	})
}

// TestControllerManagerOutlivesAPIServerRestart stops and starts a tenant's
// API server under its running controller-manager: the controller-manager
// reconnects and scales a Deployment that changed afterwards.
func TestControllerManagerOutlivesAPIServerRestart(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 1, TenantControllerManager: true})
	ctx := t.Context()
	cp := env.Tenants[0]
	tenant := newClient(t, cp)
	deploy := deployment("default", "app", 1)
	if err := tenant.Create(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	waitPodCount(t, tenant, "default", deploy.Spec.Selector.MatchLabels, 1)

	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 30*time.Second, "the Deployment scaled to 3", func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(deploy), &d); err != nil {
			return false, err
		}
		d.Spec.Replicas = ptr.To[int32](3)
		err := tenant.Update(ctx, &d)
		return err == nil, err
	})
	waitPodCount(t, tenant, "default", deploy.Spec.Selector.MatchLabels, 3)
}

// A missing component binary is named, with the option that needs it, before
// anything starts.
func TestStartWithoutComponentBinaries(t *testing.T) {
	dir := t.TempDir()
	for _, bin := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler"} {
		if err := os.WriteFile(filepath.Join(dir, bin), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := tenantrytest.Start(t.Context(), tenantrytest.Options{BinaryAssetsDirectory: dir, HostNodes: 1})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "kwok")) || !strings.Contains(err.Error(), "make envtest") {
		t.Fatalf("Start with HostNodes and no kwok = %v, want an error naming %s and make envtest", err, filepath.Join(dir, "kwok"))
	}
	// Bare API servers need none of them.
	if _, err := tenantrytest.Start(t.Context(), tenantrytest.Options{HostNodes: -1}); err == nil {
		t.Fatal("Start accepted a negative node count")
	}
}

// A component that cannot start is named, with its last lines of output,
// and nothing of the environment is left running.
func TestComponentStartFailureNamesIt(t *testing.T) {
	assets := os.Getenv(tenantrytest.AssetsEnv)
	if assets == "" {
		t.Fatal(tenantrytest.AssetsEnv + " is not set: run `make envtest` and point it at bin/")
	}
	dir := t.TempDir()
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if err := os.Symlink(filepath.Join(assets, bin), filepath.Join(dir, bin)); err != nil {
			t.Fatal(err)
		}
	}
	broken := "#!/bin/sh\necho starting up\necho 'cannot load the cluster signing key' >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "kube-controller-manager"), []byte(broken), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := tenantrytest.Start(t.Context(), tenantrytest.Options{Tenants: 1, TenantControllerManager: true, BinaryAssetsDirectory: dir})
	if err == nil {
		t.Fatal("Start succeeded with a controller-manager that exits")
	}
	t.Logf("Start: %v", err)
	for _, want := range []string{`"tenant-1"`, "kube-controller-manager", "exited", "cannot load the cluster signing key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}

func newClient(t *testing.T, cp *tenantrytest.ControlPlane) client.Client {
	t.Helper()
	c, err := client.New(cp.Config(), client.Options{})
	if err != nil {
		t.Fatalf("%s: %v", cp.Name(), err)
	}
	return c
}

func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "nginx"}}},
			},
		},
	}
}

func waitPod(t *testing.T, c client.Client, pod *corev1.Pod, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	tenantrytest.Eventually(t, 30*time.Second, "Pod "+pod.Name+" "+what, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, err
		}
		return cond(&p), fmt.Errorf("node %q, phase %q, IP %q", p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
	})
	return &p
}

func waitJobComplete(t *testing.T, c client.Client, job *batchv1.Job) {
	t.Helper()
	tenantrytest.Eventually(t, 60*time.Second, "Job "+job.Name+" Complete", func(ctx context.Context) (bool, error) {
		var j batchv1.Job
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
			return false, err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, fmt.Errorf("active %d, succeeded %d, failed %d", j.Status.Active, j.Status.Succeeded, j.Status.Failed)
	})
}

func waitPodCount(t *testing.T, c client.Client, ns string, labels map[string]string, n int) {
	t.Helper()
	tenantrytest.Eventually(t, 60*time.Second, fmt.Sprintf("%d Pods labelled %v", n, labels), func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return false, err
		}
		return len(pods.Items) == n, fmt.Errorf("%d Pods", len(pods.Items))
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func sizeOf(info os.FileInfo) int64 {
	if info == nil {
		return 0
	}
	return info.Size()
}
