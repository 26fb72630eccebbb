package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tenantry/tenantry/cmd/internal/managerapp"
	"github.com/tenantry/tenantry/controllers/syncers"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

// secretValue stands in for a credential: it must never reach a status,
// an Event or a log line.
const secretValue = "hunter2-SECRET-TOKEN-do-not-log"

// lifecycle records which clusters' tenant apps start and stop, and the
// API server each started against.
type lifecycle struct {
	mu      sync.Mutex
	started map[string][]string // cluster -> hosts, one per start
	stopped map[string]int
}

func (l *lifecycle) module() fx.Option {
	return fx.Invoke(fx.Annotate(func(lc fx.Lifecycle, cluster string, cfg *rest.Config) {
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.started[cluster] = append(l.started[cluster], cfg.Host)
				return nil
			},
			OnStop: func(context.Context) error {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.stopped[cluster]++
				return nil
			},
		})
	}, fx.ParamTags(``, clusterregistry.ClusterNameTag, ``)))
}

func (l *lifecycle) starts(cluster string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.started[cluster]...)
}

func (l *lifecycle) stops(cluster string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopped[cluster]
}

func TestMain(m *testing.M) {
	if os.Getenv(runManagerEnv) == "1" {
		// A manager process of a test (startManager).
		os.Exit(run(os.Args[1:], os.Stderr))
	}
	// The binary sets the process's loggers in run(); tests build apps
	// without it.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// TestManagementApp runs the management app in-process against a real host
// and two real tenants, as `manager --kubeconfig host.kubeconfig` would.
func TestManagementApp(t *testing.T) {
	// A host with a node is a whole cluster: among the rest, its namespace
	// controller finishes the deletion of the namespaces the manager deletes.
	env := tenantrytest.New(t, tenantrytest.Options{
		Tenants:               2,
		HostNodes:             1,
		HostCRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	host := newHostClient(t, env.Host)
	kubeconfigs := map[string][]byte{}
	for _, cp := range env.ControlPlanes() {
		data, err := cp.Kubeconfig()
		if err != nil {
			t.Fatal(err)
		}
		kubeconfigs[cp.Name()] = data
	}
	hostKubeconfig := filepath.Join(t.TempDir(), "host.kubeconfig")
	if err := os.WriteFile(hostKubeconfig, kubeconfigs["host"], 0o600); err != nil {
		t.Fatal(err)
	}

	logs := &tenantrytest.Buffer{}
	probeAddr := freeAddr(t)
	opts := managerapp.Options{Options: providers.Options{
		Kubeconfig:              hostKubeconfig,
		MetricsBindAddress:      "0",
		HealthProbeBindAddress:  probeAddr,
		SpawnTimeout:            10 * time.Second,
		ClusterHealthInterval:   200 * time.Millisecond,
		ClusterUnhealthyTimeout: 2 * time.Second,
		GracefulShutdownTimeout: 5 * time.Second,
		Logger:                  providers.LoggerOptions{Level: "debug", Output: logs},
	}, Syncers: syncers.Options{
		Resources: []string{"serviceaccounts", "pods"},
		// The default policy: denies one more prefix.
		HostPolicy: tenantryv1alpha1.HostPolicy{Metadata: &tenantryv1alpha1.MetadataPolicy{DeniedPrefixes: []string{"team.example.com/"}}},
	}}
	tenants := &lifecycle{started: map[string][]string{}, stopped: map[string]int{}}
	var registry *clusterregistry.RemoteClusterRegistry
	app := managerapp.New(opts, providers.TenantModule(tenants.module()), fx.Populate(&registry))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if err := app.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = app.Stop(context.Background())
		}
	})

	t.Run("probes answer", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz"} {
			eventually(t, 10*time.Second, path+" is 200", func(ctx context.Context) (bool, error) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+probeAddr+path, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return false, err
				}
				_ = resp.Body.Close()
				return resp.StatusCode == http.StatusOK, fmt.Errorf("status %d", resp.StatusCode)
			})
		}
	})

	t.Run("spawns and reports Ready", func(t *testing.T) {
		createSecret(t, host, "alpha-kubeconfig", kubeconfigs["tenant-1"])
		createVC(t, host, "alpha", "alpha-kubeconfig")
		vc := expectReady(t, host, "alpha", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
		if !controllerutil.ContainsFinalizer(vc, tenantryv1alpha1.Finalizer) {
			t.Error("no finalizer on a spawned VirtualCluster")
		}
		if vc.Status.ObservedGeneration != vc.Generation {
			t.Errorf("observedGeneration %d, generation %d", vc.Status.ObservedGeneration, vc.Generation)
		}
		if s, err := registry.Status("alpha"); err != nil || s.State != clusterregistry.StateRunning {
			t.Fatalf("registry: %v, %v; want Running", s, err)
		}
		if got := tenants.starts("alpha"); len(got) != 1 || got[0] != env.Tenants[0].Config().Host {
			t.Fatalf("alpha's tenant app started %v, want once against tenant-1", got)
		}
		expectEvent(t, host, "alpha", tenantryv1alpha1.ReasonSpawned)
	})

	t.Run("a garbage Secret is InvalidKubeconfig and leaks nothing", func(t *testing.T) {
		createSecret(t, host, "garbage-kubeconfig", []byte("this is not: [a kubeconfig "+secretValue))
		createVC(t, host, "garbage", "garbage-kubeconfig")
		vc := expectReady(t, host, "garbage", metav1.ConditionFalse, tenantryv1alpha1.ReasonInvalidKubeconfig)
		expectEvent(t, host, "garbage", tenantryv1alpha1.ReasonInvalidKubeconfig)
		if _, err := registry.Status("garbage"); err == nil {
			t.Fatal("a VirtualCluster with a garbage kubeconfig runs")
		}
		cond := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady)
		if strings.Contains(cond.Message, secretValue) || strings.Contains(cond.Message, "hunter2") {
			t.Fatalf("status message quotes the Secret: %q", cond.Message)
		}
	})

	t.Run("a kubeconfig that reads files is refused", func(t *testing.T) {
		fileKubeconfig := strings.Replace(string(kubeconfigs["tenant-1"]), "client-key-data:", "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n    client-key-data:", 1)
		createSecret(t, host, "file-kubeconfig", []byte(fileKubeconfig))
		createVC(t, host, "file", "file-kubeconfig")
		vc := expectReady(t, host, "file", metav1.ConditionFalse, tenantryv1alpha1.ReasonInvalidKubeconfig)
		if msg := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady).Message; !strings.Contains(msg, "tokenFile") {
			t.Fatalf("message %q does not name tokenFile", msg)
		}
	})

	t.Run("a missing Secret is SecretNotFound until it is created", func(t *testing.T) {
		createVC(t, host, "late", "late-kubeconfig")
		expectReady(t, host, "late", metav1.ConditionFalse, tenantryv1alpha1.ReasonSecretNotFound)
		createSecret(t, host, "late-kubeconfig", kubeconfigs["tenant-2"])
		expectReady(t, host, "late", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
	})

	t.Run("a rotated Secret re-spawns", func(t *testing.T) {
		var secret corev1.Secret
		if err := host.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "alpha-kubeconfig"}, &secret); err != nil {
			t.Fatal(err)
		}
		secret.Data["kubeconfig"] = kubeconfigs["tenant-2"]
		if err := host.Update(t.Context(), &secret); err != nil {
			t.Fatal(err)
		}
		want := env.Tenants[1].Config().Host
		eventually(t, 20*time.Second, "alpha re-spawned against tenant-2", func(context.Context) (bool, error) {
			got := tenants.starts("alpha")
			return len(got) == 2 && got[1] == want, fmt.Errorf("starts: %v", got)
		})
		if n := tenants.stops("alpha"); n != 1 {
			t.Fatalf("alpha's first app stopped %d times, want 1", n)
		}
		expectReady(t, host, "alpha", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
		expectEvent(t, host, "alpha", "Respawning")
	})

	t.Run("paused stops, unpaused spawns again", func(t *testing.T) {
		setPaused(t, host, "late", true)
		expectReady(t, host, "late", metav1.ConditionFalse, tenantryv1alpha1.ReasonPaused)
		if _, err := registry.Status("late"); err == nil {
			t.Fatal("a paused VirtualCluster still runs")
		}
		setPaused(t, host, "late", false)
		expectReady(t, host, "late", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
	})

	t.Run("a failed cluster is re-spawned once reachable again", func(t *testing.T) {
		tenant := env.Tenants[1] // behind both alpha and late now
		if err := tenant.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		expectReady(t, host, "late", metav1.ConditionFalse, tenantryv1alpha1.ReasonUnreachable)
		if err := tenant.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		expectReady(t, host, "late", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
		expectReady(t, host, "alpha", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
	})

	t.Run("spec.inClusterServer names the tenant API server to its Pods, and re-spawns", func(t *testing.T) {
		ctx := t.Context()
		vc := &tenantryv1alpha1.VirtualCluster{}
		if err := host.Get(ctx, client.ObjectKey{Name: "alpha"}, vc); err != nil {
			t.Fatal(err)
		}
		// Patches, not updates: the manager writes the status meanwhile.
		before := vc.DeepCopy()
		vc.Spec.InClusterServer = "http://tenant.tenants.example"
		if err := host.Patch(ctx, vc, client.MergeFrom(before)); !apierrors.IsInvalid(err) {
			t.Fatalf("an http:// in-cluster server: %v; want Invalid", err)
		}
		startsBefore := len(tenants.starts("alpha"))
		vc.Spec.InClusterServer = "https://tenant.tenants.example:6443"
		if err := host.Patch(ctx, vc, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "alpha re-spawned", func(context.Context) (bool, error) {
			return len(tenants.starts("alpha")) == startsBefore+1, nil
		})
		expectReady(t, host, "alpha", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)

		// alpha runs tenant-2 now, a bare API server: the Pod brings the
		// token volume that a tenant's admission would add. late, which
		// runs tenant-2 too, is paused meanwhile: whichever of the two
		// saw the Pod first would have it scheduled, and to the other it
		// would be a Pod that ran, never copied again.
		setPaused(t, host, "late", true)
		expectReady(t, host, "late", metav1.ConditionFalse, tenantryv1alpha1.ReasonPaused)
		defer func() {
			setPaused(t, host, "late", false)
			expectReady(t, host, "late", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
		}()
		tenant := newHostClient(t, env.Tenants[1])
		account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "runner"}}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "in-cluster"},
			Spec: corev1.PodSpec{
				ServiceAccountName: account.Name,
				Containers: []corev1.Container{{Name: "app", Image: "app", VolumeMounts: []corev1.VolumeMount{
					{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
				}}},
				Volumes: []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}},
				}}}},
			},
		}
		for _, o := range []client.Object{account, pod} {
			if err := tenant.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		key := client.ObjectKey{Namespace: syncer.HostNamespace("alpha", "default"), Name: pod.Name + "-tenantry-api-access"}
		eventually(t, 30*time.Second, "the Pod's API access Secret names the in-cluster server", func(ctx context.Context) (bool, error) {
			var secret corev1.Secret
			if err := host.Get(ctx, key, &secret); err != nil {
				return false, err
			}
			got := string(secret.Data["kubernetes-service-host"]) + ":" + string(secret.Data["kubernetes-service-port"])
			return got == "tenant.tenants.example:6443" && len(secret.Data["token"]) > 0, fmt.Errorf("server %s", got)
		})

	})

	t.Run("spec.hostPolicy puts a quota and limits in each host namespace, and steers Pods and metadata", func(t *testing.T) {
		// A VirtualCluster of its own, on tenant-1, which no other syncs now.
		ctx := t.Context()
		createSecret(t, host, "policed-kubeconfig", kubeconfigs["tenant-1"])
		vc := &tenantryv1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "policed"},
			Spec: tenantryv1alpha1.VirtualClusterSpec{
				KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "policed-kubeconfig"},
				HostPolicy: &tenantryv1alpha1.HostPolicy{
					Pods: &tenantryv1alpha1.PodPolicy{
						NodeSelector:       map[string]string{"pool": "tenants"},
						Tolerations:        []corev1.Toleration{{Key: "dedicated", Value: "tenants", Effect: corev1.TaintEffectNoSchedule}},
						AllowedVolumeTypes: []string{"gitRepo"},
					},
					Metadata:      &tenantryv1alpha1.MetadataPolicy{AllowedPrefixes: []string{"linkerd.io/"}},
					ResourceQuota: &corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}},
					LimitRange: &corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
						Type: corev1.LimitTypeContainer, Default: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
					}}},
				},
			},
		}
		if err := host.Create(ctx, vc); !apierrors.IsInvalid(err) {
			t.Fatalf("allowing gitRepo volumes: %v; want Invalid", err)
		}
		vc.Spec.HostPolicy.Pods.AllowedVolumeTypes = nil
		if err := host.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
		expectReady(t, host, "policed", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)

		tenant := newHostClient(t, env.Tenants[0])
		if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "policed"}}); err != nil {
			t.Fatal(err)
		}
		pod := func(name string) *corev1.Pod {
			return &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "policed", Name: name, Labels: map[string]string{
					"linkerd.io/control-plane-ns": "linkerd", "team.example.com/owner": "blue", "app": "web",
				}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
			}
		}
		for _, name := range []string{"first", "second", "third"} {
			if err := tenant.Create(ctx, pod(name)); err != nil {
				t.Fatal(err)
			}
		}
		hostNS := syncer.HostNamespace("policed", "policed")
		var first corev1.Pod
		eventually(t, 30*time.Second, "a host Pod", func(ctx context.Context) (bool, error) {
			var pods corev1.PodList
			if err := host.List(ctx, &pods, client.InNamespace(hostNS)); err != nil || len(pods.Items) == 0 {
				return false, err
			}
			first = pods.Items[0] // whichever the host took first: its quota takes two of the three
			return true, nil
		})
		if first.Spec.NodeSelector["pool"] != "tenants" || !slices.ContainsFunc(first.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "dedicated" }) {
			t.Errorf("host Pod: node selector %v, tolerations %v; want the policy's", first.Spec.NodeSelector, first.Spec.Tolerations)
		}
		if cpu := first.Spec.Containers[0].Resources.Limits.Cpu(); cpu.String() != "100m" {
			t.Errorf("host Pod's CPU limit %s; want the LimitRange's default 100m, in force before the first Pod", cpu)
		}
		if first.Labels["linkerd.io/control-plane-ns"] != "linkerd" || first.Labels["team.example.com/owner"] != "" || first.Labels["app"] != "web" {
			t.Errorf("host Pod labels %v: want linkerd.io/ allowed by the VirtualCluster, team.example.com/ denied by the default", first.Labels)
		}
		var quota corev1.ResourceQuota
		if err := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: syncer.QuotaName}, &quota); err != nil {
			t.Fatalf("the host namespace's quota: %v", err)
		}
		eventually(t, 30*time.Second, "two Pods in the host, and the one the host's quota refused told so", func(ctx context.Context) (bool, error) {
			var pods corev1.PodList
			if err := host.List(ctx, &pods, client.InNamespace(hostNS)); err != nil {
				return false, err
			}
			var events eventsv1.EventList
			if err := tenant.List(ctx, &events, client.InNamespace("policed")); err != nil {
				return false, err
			}
			refused := 0
			for _, e := range events.Items {
				if e.Reason == syncer.ReasonHostRejected && strings.Contains(e.Note, "exceeded quota") {
					refused++
				}
			}
			return len(pods.Items) == 2 && refused == 1, fmt.Errorf("%d host Pods, %d refused", len(pods.Items), refused)
		})
		// The quota's status changed with every Pod, and each change
		// looked at the policy objects: none was rewritten, although the
		// API server filled in the LimitRange's defaultRequest.
		for _, resource := range []string{"limitranges", "resourcequotas", "networkpolicies"} {
			m := tenantrytest.Metric(t, "tenantry_syncer_writes_total", map[string]string{
				"cluster": "policed", "resource": resource, "direction": "down", "verb": "update",
			})
			if n := m.GetCounter().GetValue(); n != 0 {
				t.Errorf("%s updated %v times; want only created", resource, n)
			}
		}

		// Without the policy, the quota and the LimitRange go.
		if err := host.Get(ctx, client.ObjectKey{Name: "policed"}, vc); err != nil {
			t.Fatal(err)
		}
		before := vc.DeepCopy()
		vc.Spec.HostPolicy = nil
		if err := host.Patch(ctx, vc, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the quota and the LimitRange gone", func(ctx context.Context) (bool, error) {
			qErr := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: syncer.QuotaName}, &corev1.ResourceQuota{})
			lErr := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: syncer.LimitRangeName}, &corev1.LimitRange{})
			return apierrors.IsNotFound(qErr) && apierrors.IsNotFound(lErr), fmt.Errorf("quota: %v; limits: %v", qErr, lErr)
		})
	})

	t.Run("a tenant past spec.hostPolicy.cache is CacheLimitExceeded, and the others sync on", func(t *testing.T) {
		ctx := t.Context()
		oneMi, eightMi := resource.MustParse("1Mi"), resource.MustParse("8Mi")
		vc := &tenantryv1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "hoarder"},
			Spec: tenantryv1alpha1.VirtualClusterSpec{
				KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "late-kubeconfig"},
				HostPolicy:          &tenantryv1alpha1.HostPolicy{Cache: &tenantryv1alpha1.CachePolicy{MaxBytes: &oneMi}},
			},
		}
		tooSmall := resource.MustParse("512Ki")
		vc.Spec.HostPolicy.Cache.MaxBytes = &tooSmall
		if err := host.Create(ctx, vc); !apierrors.IsInvalid(err) {
			t.Fatalf("a cache of 512Ki: %v; want Invalid", err)
		}
		vc.Spec.HostPolicy.Cache.MaxBytes = &oneMi
		if err := host.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := host.Delete(context.Background(), vc); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting hoarder: %v", err)
			}
		})
		expectReady(t, host, "hoarder", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)

		// The attack: ServiceAccounts with 200 KiB of annotations each.
		hoarding, other := newHostClient(t, env.Tenants[1]), newHostClient(t, env.Tenants[0])
		if err := hoarding.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hoard"}}); err != nil {
			t.Fatal(err)
		}
		attack := make(chan error, 1)
		go func() {
			for i := range 8 {
				sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "hoard", Name: fmt.Sprintf("sa-%d", i),
					Annotations: map[string]string{"hoard.example.com/data": strings.Repeat("x", 200<<10)}}}
				if err := hoarding.Create(context.Background(), sa); err != nil {
					attack <- err
					return
				}
			}
			attack <- nil
		}()
		// Meanwhile another tenant's object is copied as fast as ever.
		began := time.Now()
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "policed", Name: "meanwhile"}}
		if err := other.Create(ctx, sa); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "policed's ServiceAccount in the host", func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, client.ObjectKey{Namespace: syncer.HostNamespace("policed", "policed"), Name: "meanwhile"}, &corev1.ServiceAccount{})
			return err == nil, err
		})
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("policed's ServiceAccount copied in %s during the attack; want under 5s", took)
		}
		if err := <-attack; err != nil {
			t.Fatal(err)
		}
		vc = expectReady(t, host, "hoarder", metav1.ConditionFalse, tenantryv1alpha1.ReasonCacheLimitExceeded)
		if msg := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady).Message; !strings.Contains(msg, "ServiceAccount") || !strings.Contains(msg, "1.00 MiB") {
			t.Errorf("Ready message %q; want the type and the limit", msg)
		}
		expectEvent(t, host, "hoarder", tenantryv1alpha1.ReasonCacheLimitExceeded)
		if n := tenantrytest.Metric(t, "tenantry_registry_cache_limit_exceeded_total", map[string]string{"cluster": "hoarder"}).GetCounter().GetValue(); n < 1 {
			t.Errorf("cache_limit_exceeded_total{hoarder} = %v; want at least 1", n)
		}
		for _, name := range []string{"late", "policed"} {
			if s, err := registry.Status(name); err != nil || s.State != clusterregistry.StateRunning {
				t.Errorf("%s: %v, %v; want Running", name, s.State, err)
			}
		}

		// A host admin who raises the limit has the tenant synced at once.
		before := vc.DeepCopy()
		vc.Spec.HostPolicy.Cache.MaxBytes = &eightMi
		if err := host.Patch(ctx, vc, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
		expectReady(t, host, "hoarder", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
		if err := host.Delete(ctx, vc); err != nil {
			t.Fatal(err)
		}
		if err := hoarding.DeleteAllOf(ctx, &corev1.ServiceAccount{}, client.InNamespace("hoard")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("delete stops the tenant app, deletes its host namespaces and removes the finalizer", func(t *testing.T) {
		stopsBefore := tenants.stops("alpha")
		hostNamespace := func(name, cluster, tenantNS string) *corev1.Namespace {
			return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				syncer.LabelManagedBy: syncer.ManagedByValue, syncer.LabelCluster: cluster,
			}, Annotations: map[string]string{syncer.AnnotationTenantName: tenantNS}}}
		}
		alphas := hostNamespace(syncer.HostNamespace("alpha", "copies"), "alpha", "copies")
		// Of a cluster that no manager runs, so that only alpha's deletion
		// could touch it.
		lates := hostNamespace(syncer.HostNamespace("retired", "copies"), "retired", "copies")
		// An operator's namespace with alpha's labels copied onto it.
		impostor := hostNamespace("monitoring-copy", "alpha", "monitoring")
		for _, ns := range []*corev1.Namespace{alphas, lates, impostor} {
			if err := host.Create(t.Context(), ns); err != nil {
				t.Fatal(err)
			}
		}
		vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}}
		if err := host.Delete(t.Context(), vc); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "alpha gone", func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc)
			return apierrors.IsNotFound(err), err
		})
		if _, err := registry.Status("alpha"); err == nil {
			t.Fatal("a deleted VirtualCluster still runs")
		}
		if tenants.stops("alpha") != stopsBefore+1 {
			t.Fatal("alpha's tenant app was not stopped")
		}
		eventually(t, 60*time.Second, "alpha's host namespace deleted", func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, client.ObjectKeyFromObject(alphas), alphas)
			return apierrors.IsNotFound(err), err
		})
		if err := host.Get(t.Context(), client.ObjectKeyFromObject(lates), lates); err != nil || !lates.DeletionTimestamp.IsZero() {
			t.Fatalf("another cluster's host namespace was touched: %v", err)
		}
		if err := host.Get(t.Context(), client.ObjectKeyFromObject(impostor), impostor); err != nil || !impostor.DeletionTimestamp.IsZero() {
			t.Fatalf("a namespace with alpha's labels but not where alpha's host namespaces are was touched: %v", err)
		}
		expectEvent(t, host, "alpha", "HostCleanup")
	})

	t.Run("shutdown stops every tenant app", func(t *testing.T) {
		stopsBefore := tenants.stops("late")
		stopped = true
		if err := app.Stop(t.Context()); err != nil {
			t.Fatalf("stopping the app: %v", err)
		}
		if tenants.stops("late") != stopsBefore+1 {
			t.Fatal("late's tenant app was not stopped at shutdown")
		}
		if len(registry.List()) != 0 {
			t.Fatalf("clusters left after shutdown: %v", registry.List())
		}
	})

	if strings.Contains(logs.String(), secretValue) {
		t.Fatal("a log line quotes the Secret")
	}
	var events eventsv1.EventList
	if err := host.List(context.Background(), &events); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.Contains(e.Note, secretValue) {
			t.Fatalf("Event %s quotes the Secret: %q", e.Name, e.Note)
		}
	}
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--help"}, &out); code != 0 || !strings.Contains(out.String(), "-kubeconfig") {
		t.Fatalf("--help: exit %d, output %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"--log-level", "loud"}, &out); code != 1 || !strings.Contains(out.String(), `invalid log level "loud"`) {
		t.Fatalf("bad log level: exit %d, output %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"--kubeconfig", filepath.Join(t.TempDir(), "missing")}, &out); code != 1 || !strings.Contains(out.String(), "missing") {
		t.Fatalf("missing kubeconfig: exit %d, output %q", code, out.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shard-mode", "hash"}, `"hash" is not a shard mode`},
		{[]string{"--shard-mode", "lease", "--leader-elect"}, "exclude each other"},
		{[]string{"--shard-mode", "lease", "--shard-lease-duration", "10s"}, "--shard-renew-deadline (10s) must be shorter than --shard-lease-duration (10s)"},
		{[]string{"--shard-mode", "lease", "--shard-lease-duration", "11s"}, "--shard-renew-period (2s) must be shorter"},
		{[]string{"--leader-elect", "--leader-elect-renew-deadline", "20s"}, "must be shorter than --leader-elect-lease-duration"},
	} {
		out.Reset()
		if code := run(c.args, &out); code != 2 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: exit %d, output %q; want exit 2 and %q", c.args, code, out.String(), c.want)
		}
	}
}

func newHostClient(t *testing.T, cp *tenantrytest.ControlPlane) client.Client {
	t.Helper()
	s, err := providers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config(), client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createSecret(t *testing.T, c client.Client, name string, kubeconfig []byte) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Data:       map[string][]byte{"kubeconfig": kubeconfig},
	}
	if err := c.Create(t.Context(), s); err != nil {
		t.Fatalf("creating Secret %s: %v", name, err)
	}
}

func createVC(t *testing.T, c client.Client, name, secret string) {
	t.Helper()
	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: secret},
		},
	}
	if err := c.Create(t.Context(), vc); err != nil {
		t.Fatalf("creating VirtualCluster %s: %v", name, err)
	}
}

func setPaused(t *testing.T, c client.Client, name string, paused bool) {
	t.Helper()
	vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
	patch := []byte(fmt.Sprintf(`{"spec":{"paused":%t}}`, paused))
	if err := c.Patch(t.Context(), vc, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}

// expectReady waits until the VirtualCluster's Ready condition, observed at
// its current generation, has the status and reason.
func expectReady(t *testing.T, c client.Client, name string, status metav1.ConditionStatus, reason string) *tenantryv1alpha1.VirtualCluster {
	t.Helper()
	return expectReadyIn(t, c, name, status, reason, time.Minute)
}

// expectReadyWithin waits up to timeout for name to be Ready.
func expectReadyWithin(t *testing.T, c client.Client, name string, timeout time.Duration) *tenantryv1alpha1.VirtualCluster {
	t.Helper()
	return expectReadyIn(t, c, name, metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned, timeout)
}

func expectReadyIn(t *testing.T, c client.Client, name string, status metav1.ConditionStatus, reason string, timeout time.Duration) *tenantryv1alpha1.VirtualCluster {
	t.Helper()
	vc := &tenantryv1alpha1.VirtualCluster{}
	eventually(t, timeout, fmt.Sprintf("%s Ready=%s/%s", name, status, reason), func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, vc); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady)
		if cond == nil {
			return false, fmt.Errorf("no Ready condition")
		}
		ok := cond.Status == status && cond.Reason == reason && cond.ObservedGeneration == vc.Generation
		return ok, fmt.Errorf("Ready=%s/%s: %s", cond.Status, cond.Reason, cond.Message)
	})
	return vc
}

func expectEvent(t *testing.T, c client.Client, name, reason string) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("Event %s on %s", reason, name), func(ctx context.Context) (bool, error) {
		var list eventsv1.EventList
		if err := c.List(ctx, &list); err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "VirtualCluster" && e.Regarding.Name == name && e.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
}

// eventually is tenantrytest.Eventually.
var eventually = tenantrytest.Eventually

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := tenantrytest.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestSyncResourcesFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--sync-resources", "configmaps,gadgets"}, &out); code != 2 || !strings.Contains(out.String(), `unknown syncer "gadgets"`) {
		t.Fatalf("unknown syncer: exit %d, output %q", code, out.String())
	}
}
