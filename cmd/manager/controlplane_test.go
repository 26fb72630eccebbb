package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
	"github.com/tenantry/tenantry/pkg/snapshot"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// TestProvisionedControlPlane: a VirtualCluster with spec.controlPlane
// gets a control plane run in the host, on real nodes: it becomes Ready,
// kubectl with the kubeconfig Tenantry wrote runs a Deployment whose Pods
// run in the host and serve, logs and exec reach them, the tenant's data
// outlive its control plane's Pod, it sleeps and a request wakes it, and
// deleting the VirtualCluster leaves nothing of it in the host. Beside it,
// a tenant that no one uses sleeps after its spec.sleep.afterInactivity,
// and tenantry connect wakes it. Then snapshots and restores.
func TestProvisionedControlPlane(t *testing.T) {
	tenantrytest.RequireRealNodes(t)
	env := tenantrytest.New(t, tenantrytest.Options{
		HostKubelets:          2,
		HostCRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	host := newHostClient(t, env.Host)
	startProvisioningManager(t, env)
	ctx := t.Context()

	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "gamma"},
		Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "gamma-kubeconfig"},
			ControlPlane:        &tenantryv1alpha1.ControlPlaneSpec{},
		},
	}
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			describeNamespace(t, host, controlplane.Namespace("gamma"))
		}
	})
	// Beside it, a tenant that sleeps after a minute that no one uses it,
	// which its minute spends while gamma is tested.
	idleVC := createIdleTenant(t, host, "idle")
	start := time.Now()
	awaitControlPlane := func(what string) {
		t.Helper()
		awaitControlPlaneReady(t, host, vc, what)
	}
	awaitControlPlane("gamma's control plane ready")
	t.Logf("the control plane was ready in %s", time.Since(start).Round(time.Second))
	expectReady(t, host, "gamma", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
	if s := vc.Status.ControlPlane; s == nil || s.Version != controlplane.PinnedVersion || s.Namespace != controlplane.Namespace("gamma") ||
		!strings.HasPrefix(s.Endpoint, "https://") || s.CertificatesExpire == nil {
		t.Errorf("status.controlPlane %+v", s)
	}

	var secret corev1.Secret
	if err := host.Get(ctx, client.ObjectKey{Namespace: "default", Name: "gamma-kubeconfig"}, &secret); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "gamma.kubeconfig")
	if err := os.WriteFile(kubeconfig, secret.Data[tenantryv1alpha1.DefaultKubeconfigKey], 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl, err := tenantrytest.FindKubectl()
	if err != nil {
		t.Fatal(err)
	}
	if who := kubectl.MustRun(t, kubeconfig, "", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); who != controlplane.AdminUser {
		t.Errorf("the kubeconfig's user is %q, want %s", who, controlplane.AdminUser)
	}
	idle := useIdleTenant(t, host, kubectl, idleVC)
	// A user outside the host: through a port forwarded by the host
	// (tenantry connect).
	forwardCtx, stopForwarding := context.WithCancel(ctx)
	server, done, err := controlplane.Forward(forwardCtx, env.Host.Config(), "gamma", 0)
	if err != nil {
		t.Fatal(err)
	}
	forwarded := withServer(t, kubeconfig, server)
	if out := kubectl.MustRun(t, forwarded, "", "get", "namespace", "kube-system", "-o", "name"); strings.TrimSpace(out) != "namespace/kube-system" {
		t.Errorf("through the forwarded port: %q", out)
	}
	stopForwarding()
	if err := <-done; err != nil {
		t.Errorf("forwarding ended with %v", err)
	}

	kubectl.MustRun(t, kubeconfig, "", "create", "deployment", "web", "--image="+agnhostImage, "--replicas=2", "--port=8080", "--", "/agnhost", "netexec", "--http-port=8080")
	kubectl.MustRun(t, kubeconfig, "", "expose", "deployment", "web", "--port=80", "--target-port=8080")
	kubectl.MustRun(t, kubeconfig, "", "wait", "--for=condition=Available", "--timeout=180s", "deployment/web")
	hostNS := "gamma-" // the host namespaces of gamma's tenant namespaces
	var pods corev1.PodList
	if err := host.List(ctx, &pods, client.MatchingLabels{"app": "web"}); err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Namespace, hostNS) && p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	if running != 2 {
		t.Errorf("%d of the Deployment's Pods run in the host, want 2", running)
	}
	kubectl.MustRun(t, kubeconfig, "", "run", "client", "--image="+agnhostImage, "--restart=Never", "--command", "--", "sleep", "3600")
	kubectl.MustRun(t, kubeconfig, "", "wait", "--for=condition=Ready", "--timeout=120s", "pod/client")
	eventually(t, time.Minute, "GET http://web.default/hostname from a tenant Pod", func(ctx context.Context) (bool, error) {
		out, err := kubectl.Run(ctx, kubeconfig, "", "exec", "client", "--", "curl", "-sS", "-m", "5", "http://web.default/hostname")
		return err == nil && strings.HasPrefix(strings.TrimSpace(out), "web-"), fmt.Errorf("%q: %v", out, err)
	})
	// Its own Pods reach its API server; another tenant's do not.
	apiServer := vc.Status.ControlPlane.Endpoint + "/readyz"
	eventually(t, time.Minute, "gamma's API server from gamma's Pod", func(ctx context.Context) (bool, error) {
		out, err := kubectl.Run(ctx, kubeconfig, "", "exec", "client", "--", "curl", "-sk", "-m", "5", apiServer)
		return err == nil && strings.TrimSpace(out) == "ok", fmt.Errorf("%q: %v", out, err)
	})
	intruderNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "delta-intruder", Labels: map[string]string{
		"tenantry.dev/managed-by": "tenantry", "tenantry.dev/cluster": "delta", // as another tenant's host namespace
	}}}
	intruder := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: intruderNS.Name, Name: "intruder"},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
			Name: "intruder", Image: agnhostImage, Command: []string{"sleep", "3600"},
		}}},
	}
	for _, o := range []client.Object{intruderNS, intruder} {
		if err := host.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 90*time.Second, "another tenant's Pod running", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKeyFromObject(intruder), intruder)
		return err == nil && intruder.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s: %v", intruder.Status.Phase, err)
	})
	hostKubeconfig, err := env.Host.KubeconfigFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl.Run(ctx, hostKubeconfig, "", "-n", intruderNS.Name, "exec", "intruder", "--", "curl", "-sk", "-m", "5", apiServer); err == nil {
		t.Errorf("another tenant's Pod reached gamma's API server: %q", out)
	}

	podName := strings.TrimPrefix(kubectl.MustRun(t, kubeconfig, "", "get", "pods", "-l", "app=web", "-o", "name"), "pod/")
	podName = strings.Fields(podName)[0]
	if out := kubectl.MustRun(t, kubeconfig, "", "exec", podName, "--", "echo", "exec works"); strings.TrimSpace(out) != "exec works" {
		t.Errorf("kubectl exec printed %q", out)
	}
	if out := kubectl.MustRun(t, kubeconfig, "", "logs", podName); out == "" {
		t.Error("kubectl logs printed nothing")
	}
	// What a restore must bring back, beside the Deployment and its
	// Service: a ConfigMap, a Secret, and a custom resource of the
	// tenant's own.
	kubectl.MustRun(t, kubeconfig, "", "create", "configmap", "settings", "--from-literal=color=blue")
	kubectl.MustRun(t, kubeconfig, "", "create", "secret", "generic", "creds", "--from-literal=password=hunter2")
	kubectlApply(t, kubectl, kubeconfig, widgetCRD)
	kubectlApply(t, kubectl, kubeconfig, widget)
	gammaSnapshot := expectSnapshot(t, env.Host.Config(), host, vc, tenantryv1alpha1.StorageEmbedded, "deployments/default/web")

	// The control plane's Pod deleted: it comes back with the tenant's
	// data.
	cpPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: controlplane.Namespace("gamma"), Name: controlplane.WorkloadName + "-0"}}
	if err := host.Get(ctx, client.ObjectKeyFromObject(cpPod), cpPod); err != nil {
		t.Fatal(err)
	}
	uid := cpPod.UID
	if err := host.Delete(ctx, cpPod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the control plane's Pod back, ready", func(ctx context.Context) (bool, error) {
		p := &corev1.Pod{}
		if err := host.Get(ctx, client.ObjectKeyFromObject(cpPod), p); err != nil {
			return false, err
		}
		return p.UID != uid && podIsReady(p), fmt.Errorf("UID %s, phase %s", p.UID, p.Status.Phase)
	})
	awaitControlPlane("gamma's control plane ready again")
	eventually(t, time.Minute, "the Deployment read from the restarted control plane", func(ctx context.Context) (bool, error) {
		out, err := kubectl.Run(ctx, kubeconfig, "", "get", "deployment", "web", "-o", "jsonpath={.spec.replicas}")
		return out == "2", fmt.Errorf("%q: %v", out, err)
	})

	expectSleepAndWake(t, host, kubectl, vc, kubeconfig)
	expectSleptWhenIdle(t, env, host, kubectl, idle)

	// Deleted: nothing of it is left in the host.
	if err := host.Delete(ctx, vc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "gamma gone, with its control plane and kubeconfig", func(ctx context.Context) (bool, error) {
		var left []string
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), &tenantryv1alpha1.VirtualCluster{}); !apierrors.IsNotFound(err) {
			left = append(left, "the VirtualCluster")
		}
		if err := host.Get(ctx, client.ObjectKey{Name: controlplane.Namespace("gamma")}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			left = append(left, "namespace "+controlplane.Namespace("gamma"))
		}
		if err := host.Get(ctx, client.ObjectKeyFromObject(&secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			left = append(left, "the kubeconfig Secret")
		}
		var sets appsv1.StatefulSetList
		if err := host.List(ctx, &sets, client.MatchingLabels{controlplane.LabelControlPlane: "gamma"}); err != nil || len(sets.Items) > 0 {
			left = append(left, "StatefulSets")
		}
		var volumes corev1.PersistentVolumeList
		if err := host.List(ctx, &volumes); err != nil {
			return false, err
		}
		for _, v := range volumes.Items {
			if v.Spec.ClaimRef != nil && v.Spec.ClaimRef.Namespace == controlplane.Namespace("gamma") {
				left = append(left, "volume "+v.Name)
			}
		}
		var namespaces corev1.NamespaceList
		if err := host.List(ctx, &namespaces); err != nil {
			return false, err
		}
		for _, ns := range namespaces.Items {
			if strings.HasPrefix(ns.Name, hostNS) && ns.Status.Phase != corev1.NamespaceTerminating {
				left = append(left, "namespace "+ns.Name)
			}
		}
		return len(left) == 0, fmt.Errorf("left: %v", left)
	})

	// Restored under another name, onto an etcd of its own: every object
	// is back, gamma's own credentials are trusted, and its Deployment
	// runs again in the host and answers through its Service. A snapshot
	// cut short or changed makes nothing.
	expectCorruptRefused(t, env.Host.Config(), host, gammaSnapshot, "gamma-restored")
	// Through a registry, as tenantry snapshot --out oci://... pushes it.
	gammaSnapshot = throughRegistry(t, gammaSnapshot)
	restored, restoredKubeconfig := restoreSnapshot(t, env.Host.Config(), host, gammaSnapshot, snapshot.RestoreOptions{
		Name: "gamma-restored", Storage: &tenantryv1alpha1.ControlPlaneStorage{Type: tenantryv1alpha1.StorageEtcd},
	})
	expectTenantHolds(t, kubectl, restoredKubeconfig, map[string]string{
		"configmap settings -o jsonpath={.data.color}":  "blue",
		"secret creds -o jsonpath={.data.password}":     base64.StdEncoding.EncodeToString([]byte("hunter2")),
		"widget w1 -o jsonpath={.spec.size}":            "7",
		"deployment web -o jsonpath={.spec.replicas}":   "2",
		"service web -o jsonpath={.spec.ports[0].port}": "80",
	})
	gammaAtRestored := withServer(t, kubeconfig, restored.Status.ControlPlane.Endpoint)
	if who := kubectl.MustRun(t, gammaAtRestored, "", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); who != controlplane.AdminUser {
		t.Errorf("gamma's kubeconfig at the restored tenant is %q, want %s", who, controlplane.AdminUser)
	}
	expectRunningInHost(t, host, "gamma-restored", "app=web", 2)
	kubectl.MustRun(t, restoredKubeconfig, "", "run", "client-again", "--image="+agnhostImage, "--restart=Never", "--command", "--", "sleep", "3600")
	kubectl.MustRun(t, restoredKubeconfig, "", "wait", "--for=condition=Ready", "--timeout=120s", "pod/client-again")
	eventually(t, time.Minute, "GET http://web.default/hostname in the restored tenant", func(ctx context.Context) (bool, error) {
		out, err := kubectl.Run(ctx, restoredKubeconfig, "", "exec", "client-again", "--", "curl", "-sS", "-m", "5", "http://web.default/hostname")
		return err == nil && strings.HasPrefix(strings.TrimSpace(out), "web-"), fmt.Errorf("%q: %v", out, err)
	})
	expectRestoreRefused(t, env.Host.Config(), host, gammaSnapshot, snapshot.RestoreOptions{Name: "gamma-restored"}, snapshot.ErrExists)
}

// awaitControlPlaneReady waits until vc's control plane is ready for its
// generation, and reads vc.
func awaitControlPlaneReady(t *testing.T, host client.Client, vc *tenantryv1alpha1.VirtualCluster, what string) {
	t.Helper()
	eventually(t, 4*time.Minute, what, func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == vc.Generation, fmt.Errorf("condition %+v", c)
	})
}

// TestControlPlaneStorageAndVersions: the other two storage types, and a
// version change, on real nodes. A control plane with an etcd of its own
// (storage Etcd) starts at the previous release and moves to the pinned
// one with its data; two share a DataStore (an etcd outside the Pod
// network, as a host admin runs one), each under its own prefix that the
// other's credentials cannot read, and no tenant's Pod reaches the store.
// Deleting one takes its keys and leaves the other's.
func TestControlPlaneStorageAndVersions(t *testing.T) {
	tenantrytest.RequireRealNodes(t)
	env := tenantrytest.New(t, tenantrytest.Options{
		HostKubelets:          2,
		HostCRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	host := newHostClient(t, env.Host)
	ctx := t.Context()
	store, err := tenantrytest.StartEtcdDataStore(ctx, "", env.ExtraIP())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := host.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shared-etcd"}, Data: store.Secret}); err != nil {
		t.Fatal(err)
	}
	if err := host.Create(ctx, &tenantryv1alpha1.DataStore{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: tenantryv1alpha1.DataStoreSpec{
		Etcd: tenantryv1alpha1.EtcdDataStore{Endpoints: []string{store.Endpoint}, SecretRef: tenantryv1alpha1.SecretReference{Namespace: "default", Name: "shared-etcd"}},
	}}); err != nil {
		t.Fatal(err)
	}
	startProvisioningManager(t, env, "--control-plane-versions", previousVersion)

	onStore := tenantryv1alpha1.ControlPlaneStorage{Type: tenantryv1alpha1.StorageDataStore, DataStore: "shared"}
	vcs := map[string]*tenantryv1alpha1.VirtualCluster{}
	for name, spec := range map[string]tenantryv1alpha1.ControlPlaneSpec{
		"own-etcd": {Version: previousVersion, Storage: tenantryv1alpha1.ControlPlaneStorage{Type: tenantryv1alpha1.StorageEtcd}},
		"shared-a": {Storage: onStore},
		"shared-b": {Storage: onStore},
	} {
		vcs[name] = &tenantryv1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: tenantryv1alpha1.VirtualClusterSpec{
				KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: name + "-kubeconfig"},
				ControlPlane:        &spec,
			},
		}
		if err := host.Create(ctx, vcs[name]); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				describeNamespace(t, host, controlplane.Namespace(name))
			}
		})
	}
	kubectl, err := tenantrytest.FindKubectl()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigs := map[string]string{}
	for name, vc := range vcs {
		awaitControlPlaneReady(t, host, vc, name+"'s control plane ready")
		kubeconfigs[name] = tenantKubeconfig(t, host, name)
		kubectl.MustRun(t, kubeconfigs[name], "", "create", "configmap", "kept", "--from-literal=owner="+name)
	}
	ownEtcdSnapshot := expectSnapshot(t, env.Host.Config(), host, vcs["own-etcd"], tenantryv1alpha1.StorageEtcd, "configmaps/default/kept")
	sharedSnapshot := expectSnapshot(t, env.Host.Config(), host, vcs["shared-a"], tenantryv1alpha1.StorageDataStore, "configmaps/default/kept")
	if v := vcs["own-etcd"].Status.ControlPlane.Version; v != previousVersion {
		t.Errorf("own-etcd runs %s, want %s", v, previousVersion)
	}

	// The store keeps shared-a and shared-b apart: each one's API server
	// credentials read its own keys and not the other's.
	etcdClient := func(name string) *clientv3.Client {
		t.Helper()
		var pki corev1.Secret
		if err := host.Get(ctx, client.ObjectKey{Namespace: controlplane.Namespace(name), Name: controlplane.PKISecretName}, &pki); err != nil {
			t.Fatal(err)
		}
		c, err := store.Client(pki.Data[controlplane.KeyEtcdClientCert], pki.Data[controlplane.KeyEtcdClientKey])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a := etcdClient("shared-a")
	if got, err := a.Get(ctx, datastore.Prefix("shared-a")+"registry/configmaps/default/kept"); err != nil || got.Count != 1 {
		t.Errorf("shared-a's ConfigMap in the store: %v, %v", got, err)
	}
	if _, err := a.Get(ctx, datastore.Prefix("shared-b"), clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("shared-a's API server credentials reading shared-b's keys: %v, want permission denied", err)
	}
	// No tenant Pod reaches the store; the same Pod reaches the kit's DNS
	// at this machine's other address.
	eventually(t, time.Minute, "a tenant Pod created", func(ctx context.Context) (bool, error) {
		// Once the tenant's controller-manager has made its default
		// ServiceAccount.
		out, err := kubectl.Run(ctx, kubeconfigs["shared-a"], "", "run", "prober", "--image="+agnhostImage, "--restart=Never", "--command", "--", "sleep", "3600")
		return err == nil, fmt.Errorf("%q: %v", out, err)
	})
	kubectl.MustRun(t, kubeconfigs["shared-a"], "", "wait", "--for=condition=Ready", "--timeout=120s", "pod/prober")
	eventually(t, time.Minute, "the kit's DNS over TCP from a tenant Pod", func(ctx context.Context) (bool, error) {
		out, err := kubectl.Run(ctx, kubeconfigs["shared-a"], "", "exec", "prober", "--", "/agnhost", "connect", "--timeout=3s", net.JoinHostPort(env.KitIP(), "53"))
		return err == nil, fmt.Errorf("%q: %v", out, err)
	})
	if out, err := kubectl.Run(ctx, kubeconfigs["shared-a"], "", "exec", "prober", "--", "/agnhost", "connect", "--timeout=3s", store.Host()); err == nil {
		t.Errorf("a tenant Pod reached the DataStore at %s: %q", store.Host(), out)
	}
	// Nor another tenant's own etcd.
	var etcdService corev1.Service
	if err := host.Get(ctx, client.ObjectKey{Namespace: controlplane.Namespace("own-etcd"), Name: controlplane.EtcdName}, &etcdService); err != nil {
		t.Fatal(err)
	}
	etcdAddr := net.JoinHostPort(etcdService.Spec.ClusterIP, strconv.Itoa(controlplane.EtcdPort))
	if out, err := kubectl.Run(ctx, kubeconfigs["shared-a"], "", "exec", "prober", "--", "/agnhost", "connect", "--timeout=3s", etcdAddr); err == nil {
		t.Errorf("a tenant Pod reached own-etcd's etcd at %s: %q", etcdAddr, out)
	}

	// A version change: one minor release forward, with the data kept.
	patch := client.MergeFrom(vcs["own-etcd"].DeepCopy())
	vcs["own-etcd"].Spec.ControlPlane.Version = controlplane.PinnedVersion
	if err := host.Patch(ctx, vcs["own-etcd"], patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 4*time.Minute, "own-etcd moved to "+controlplane.PinnedVersion, func(ctx context.Context) (bool, error) {
		vc := vcs["own-etcd"]
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == vc.Generation && vc.Status.ControlPlane.Version == controlplane.PinnedVersion,
			fmt.Errorf("condition %+v, status %+v", c, vc.Status.ControlPlane)
	})
	eventually(t, time.Minute, "own-etcd's API server at "+controlplane.PinnedVersion+", its ConfigMap kept", func(ctx context.Context) (bool, error) {
		out, err := kubectl.Run(ctx, kubeconfigs["own-etcd"], "", "version", "-o", "json")
		var version struct {
			Server struct {
				GitVersion string `json:"gitVersion"`
			} `json:"serverVersion"`
		}
		if err != nil || json.Unmarshal([]byte(out), &version) != nil || version.Server.GitVersion != controlplane.PinnedVersion {
			return false, fmt.Errorf("version %q: %v", out, err)
		}
		out, err = kubectl.Run(ctx, kubeconfigs["own-etcd"], "", "get", "configmap", "kept", "-o", "jsonpath={.data.owner}")
		return out == "own-etcd", fmt.Errorf("%q: %v", out, err)
	})
	// Back a release: refused, and it runs on.
	patch = client.MergeFrom(vcs["own-etcd"].DeepCopy())
	vcs["own-etcd"].Spec.ControlPlane.Version = previousVersion
	if err := host.Patch(ctx, vcs["own-etcd"], patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "going back refused", func(ctx context.Context) (bool, error) {
		vc := vcs["own-etcd"]
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady)
		return c != nil && c.Reason == tenantryv1alpha1.ReasonVersionSkew, fmt.Errorf("condition %+v", c)
	})

	// shared-a deleted: its keys and user go from the store, shared-b's
	// stay; nothing of either deleted one is left in the host.
	for _, name := range []string{"shared-a", "own-etcd"} {
		if err := host.Delete(ctx, vcs[name]); err != nil {
			t.Fatal(err)
		}
	}
	root, err := store.Client(store.Secret[datastore.KeyRootCert], store.Secret[datastore.KeyRootKey])
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	eventually(t, 3*time.Minute, "shared-a and own-etcd gone, with their data", func(ctx context.Context) (bool, error) {
		var left []string
		for _, name := range []string{"shared-a", "own-etcd"} {
			if err := host.Get(ctx, client.ObjectKey{Name: name}, &tenantryv1alpha1.VirtualCluster{}); !apierrors.IsNotFound(err) {
				left = append(left, "VirtualCluster "+name)
			}
			if err := host.Get(ctx, client.ObjectKey{Name: controlplane.Namespace(name)}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
				left = append(left, "namespace "+controlplane.Namespace(name))
			}
		}
		keys, err := root.Get(ctx, datastore.Prefix("shared-a"), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return false, err
		}
		if keys.Count > 0 {
			left = append(left, fmt.Sprintf("%d keys of shared-a", keys.Count))
		}
		return len(left) == 0, fmt.Errorf("left: %v", left)
	})
	if keys, err := root.Get(ctx, datastore.Prefix("shared-b"), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || keys.Count == 0 {
		t.Errorf("shared-b's keys: %v, %v", keys, err)
	}
	if out := kubectl.MustRun(t, kubeconfigs["shared-b"], "", "get", "configmap", "kept", "-o", "jsonpath={.data.owner}"); out != "shared-b" {
		t.Errorf("shared-b's ConfigMap: %q", out)
	}

	// Paused: the sync stops, the control plane runs on.
	patch = client.MergeFrom(vcs["shared-b"].DeepCopy())
	vcs["shared-b"].Spec.Paused = true
	if err := host.Patch(ctx, vcs["shared-b"], patch); err != nil {
		t.Fatal(err)
	}
	expectReady(t, host, "shared-b", metav1.ConditionFalse, tenantryv1alpha1.ReasonPaused)
	awaitControlPlaneReady(t, host, vcs["shared-b"], "shared-b's control plane ready while paused")
	kubectl.MustRun(t, kubeconfigs["shared-b"], "", "create", "configmap", "while-paused")

	// Restores across storage types: shared-a's (a DataStore) into an
	// embedded etcd; own-etcd's, taken at the previous release, into the
	// DataStore at the pinned one. Back a release is refused, and making
	// nothing.
	expectRestoreRefused(t, env.Host.Config(), host, sharedSnapshot, snapshot.RestoreOptions{Name: "too-old", Version: previousVersion}, controlplane.ErrVersionSkew)
	_, fromStore := restoreSnapshot(t, env.Host.Config(), host, sharedSnapshot, snapshot.RestoreOptions{
		Name: "from-store", Storage: &tenantryv1alpha1.ControlPlaneStorage{Type: tenantryv1alpha1.StorageEmbedded},
	})
	expectTenantHolds(t, kubectl, fromStore, map[string]string{"configmap kept -o jsonpath={.data.owner}": "shared-a"})
	toStoreVC, toStore := restoreSnapshot(t, env.Host.Config(), host, ownEtcdSnapshot, snapshot.RestoreOptions{
		Name: "to-store", Version: controlplane.PinnedVersion, Storage: &onStore,
	})
	expectTenantHolds(t, kubectl, toStore, map[string]string{"configmap kept -o jsonpath={.data.owner}": "own-etcd"})
	if v := toStoreVC.Status.ControlPlane.Version; v != controlplane.PinnedVersion {
		t.Errorf("own-etcd's snapshot of %s restored at %s, want %s", previousVersion, v, controlplane.PinnedVersion)
	}

	expectScheduledSnapshots(t, host, vcs["shared-b"])
}

// previousVersion is the release before the pinned one, whose control
// plane images the kit serves too (hack/previous).
const previousVersion = "v1.36.3"

// describeNamespace logs what a failed test needs to know of a host
// namespace: its Pods' statuses, its claims and its Events.
// expectSnapshot takes a snapshot of vc while it runs, as `tenantry
// snapshot` does, and checks it whole: taken from storage, holding the
// tenant's key want (without the storage's prefix) and its identity.
func expectSnapshot(t *testing.T, hostConfig *rest.Config, host client.Client, vc *tenantryv1alpha1.VirtualCluster, storage tenantryv1alpha1.StorageType, want string) []byte {
	t.Helper()
	var out bytes.Buffer
	taken, err := snapshot.OfVirtualCluster(t.Context(), hostConfig, host, vc, &out, t.TempDir())
	if err != nil {
		t.Fatalf("a snapshot of %s: %v", vc.Name, err)
	}
	m := taken.Manifest
	t.Logf("a snapshot of %s (%s): %d keys, %d bytes, %d compressed, at revision %d, in %s", vc.Name, m.Storage, m.Keys, m.Bytes, taken.Size, m.Revision, m.Took)
	if m.Storage != string(storage) || m.Cluster != vc.Name || m.KubernetesVersion == "" || len(m.PKI[controlplane.KeyCAKey]) == 0 || taken.Size != int64(out.Len()) {
		t.Errorf("the snapshot's manifest: storage %s, cluster %s, version %q, a CA key: %v, size %d of %d", m.Storage, m.Cluster, m.KubernetesVersion, len(m.PKI[controlplane.KeyCAKey]) > 0, taken.Size, out.Len())
	}
	r, err := snapshot.Open(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	if err := r.Each(func(key, _ []byte) error {
		found = found || string(key) == want
		return nil
	}); err != nil {
		t.Fatalf("reading the snapshot of %s: %v", vc.Name, err)
	}
	if !found {
		t.Errorf("the snapshot of %s has no %s", vc.Name, want)
	}
	return out.Bytes()
}

func describeNamespace(t *testing.T, host client.Client, namespace string) {
	ctx := context.Background()
	var pods corev1.PodList
	if err := host.List(ctx, &pods, client.InNamespace(namespace)); err == nil {
		for _, p := range pods.Items {
			t.Logf("Pod %s on %q: %s %+v\n  init: %+v\n  containers: %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions,
				p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
		}
	}
	var claims corev1.PersistentVolumeClaimList
	if err := host.List(ctx, &claims, client.InNamespace(namespace)); err == nil {
		for _, c := range claims.Items {
			t.Logf("claim %s: %s, volume %q, class %v", c.Name, c.Status.Phase, c.Spec.VolumeName, ptr.Deref(c.Spec.StorageClassName, ""))
		}
	}
	var events eventsv1.EventList
	if err := host.List(ctx, &events, client.InNamespace(namespace)); err == nil {
		for _, e := range events.Items {
			t.Logf("event %s %s/%s: %s %s", e.Type, e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Note)
		}
	}
}

// describeRestarts logs the last lines that each container of
// namespace's Pods that restarted wrote before it did.
func describeRestarts(t *testing.T, config *rest.Config, namespace string) {
	c, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Log(err)
		return
	}
	pods, err := c.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Log(err)
		return
	}
	for _, p := range pods.Items {
		for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if s.RestartCount == 0 {
				continue
			}
			out, err := c.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: s.Name, Previous: true, TailLines: ptr.To[int64](15)}).DoRaw(context.Background())
			t.Logf("Pod %s, container %s, restarted %d times; its last lines before: %s%s", p.Name, s.Name, s.RestartCount, out, errorText(err))
		}
	}
}

// errorText is err's text, if there is one.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

// startProvisioningManager starts the manager for env's host, with real
// nodes, as it runs control planes there: on this machine, outside the
// host's Pods, it serves tenant DNS, the kubelet API, sleeping control
// planes and their reports on the kit network, and is let in to control
// planes from it.
func startProvisioningManager(t *testing.T, env *tenantrytest.Environment, args ...string) *managerProcess {
	t.Helper()
	data, err := env.Host.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kitIP := env.KitIP()
	return startManager(t, data, append([]string{
		"--dns-bind-address", net.JoinHostPort(kitIP, "53"), "--dns-nameserver", kitIP, "--dns-upstream", startUpstream(t),
		"--kubelet-bind-address", freeAddrOn(t, kitIP),
		"--control-plane-manager-cidrs", env.KitNetworkCIDR(), "--control-plane-wake-address", kitIP,
		"--control-plane-activity-bind-address", net.JoinHostPort(kitIP, "0"),
	}, args...)...)
}

// tenantKubeconfig writes the kubeconfig that Tenantry wrote for
// VirtualCluster name (its Secret default/NAME-kubeconfig) to a file, and
// returns its path.
func tenantKubeconfig(t *testing.T, host client.Client, name string) string {
	t.Helper()
	var secret corev1.Secret
	if err := host.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name + "-kubeconfig"}, &secret); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := os.WriteFile(file, secret.Data[tenantryv1alpha1.DefaultKubeconfigKey], 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
