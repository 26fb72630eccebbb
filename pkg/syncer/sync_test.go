package syncer_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/netpol"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// sharedWorld is a host that schedules and runs Pods on two simulated
// nodes, and two tenants that run their own kube-controller-manager, each
// spawned with every built-in syncer through one hub: what a real
// installation looks like. Tests that need no API server (the fuzz
// target's workers among them) start none.
var sharedWorld = syncertest.Share(syncertest.WorldOptions{
	Tenants: 2, HostNodes: 2, TenantControllerManager: true, Syncers: allSyncers(),
})

// allSyncers are every built-in syncer, told the host's service range as
// the manager tells them: envtest's, 10.0.0.0/24, which is every tenant's
// too.
func allSyncers() []syncer.Syncer {
	s, err := builtin.ByName(builtin.Names(), builtin.Options{HostServiceRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		panic(err)
	}
	return s
}

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

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: data}
}

// expectHostConfigMap waits for the host copy of tenant ConfigMap
// default/name of cluster to hold data.
func expectHostConfigMap(t *testing.T, cluster, name string, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	eventually(t, 10*time.Second, fmt.Sprintf("host copy of %s default/%s = %v", cluster, name, data), func(ctx context.Context) (bool, error) {
		if err := shared.Host.Get(ctx, client.ObjectKey{Namespace: hostNS(cluster, "default"), Name: name}, &cm); err != nil {
			return false, err
		}
		return fmt.Sprint(cm.Data) == fmt.Sprint(data), fmt.Errorf("data %v", cm.Data)
	})
	return &cm
}

func TestConfigMapSync(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	name := unique("app")
	for cluster, value := range map[string]string{"tenant-1": "one", "tenant-2": "two"} {
		if err := shared.Tenants[cluster].Create(ctx, configMap(name, map[string]string{"value": value})); err != nil {
			t.Fatal(err)
		}
	}

	var uid1 string
	for cluster, value := range map[string]string{"tenant-1": "one", "tenant-2": "two"} {
		cm := expectHostConfigMap(t, cluster, name, map[string]string{"value": value})
		var tenantCM corev1.ConfigMap
		if err := shared.Tenants[cluster].Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &tenantCM); err != nil {
			t.Fatal(err)
		}
		wantLabels := map[string]string{syncer.LabelManagedBy: syncer.ManagedByValue, syncer.LabelCluster: cluster}
		for k, v := range wantLabels {
			if cm.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", cluster, k, cm.Labels[k], v)
			}
		}
		wantAnnotations := map[string]string{
			syncer.AnnotationTenantNamespace: "default",
			syncer.AnnotationTenantName:      name,
			syncer.AnnotationTenantUID:       string(tenantCM.UID),
		}
		for k, v := range wantAnnotations {
			if cm.Annotations[k] != v {
				t.Errorf("%s: annotation %s = %q, want %q", cluster, k, cm.Annotations[k], v)
			}
		}
		var ns corev1.Namespace
		if err := shared.Host.Get(ctx, client.ObjectKey{Name: cm.Namespace}, &ns); err != nil {
			t.Fatal(err)
		}
		if ns.Labels[syncer.LabelCluster] != cluster || ns.Annotations[syncer.AnnotationTenantName] != "default" ||
			ns.Labels["pod-security.kubernetes.io/enforce"] != syncer.DefaultPodSecurityLevel {
			t.Errorf("%s: host namespace %s has labels %v, annotations %v", cluster, ns.Name, ns.Labels, ns.Annotations)
		}
		if cluster == "tenant-1" {
			uid1 = string(cm.UID)
		}
	}

	t.Run("a tenant edit propagates", func(t *testing.T) {
		patch := client.MergeFrom(configMap(name, nil))
		if err := shared.Tenants["tenant-1"].Patch(ctx, configMap(name, map[string]string{"value": "uno"}), patch); err != nil {
			t.Fatal(err)
		}
		expectHostConfigMap(t, "tenant-1", name, map[string]string{"value": "uno"})
		expectHostConfigMap(t, "tenant-2", name, map[string]string{"value": "two"})
	})

	t.Run("a hand edit of the host copy is reverted", func(t *testing.T) {
		var cm corev1.ConfigMap
		if err := shared.Host.Get(ctx, client.ObjectKey{Namespace: hostNS("tenant-1", "default"), Name: name}, &cm); err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"value": "tampered"}
		if err := shared.Host.Update(ctx, &cm); err != nil {
			t.Fatal(err)
		}
		expectHostConfigMap(t, "tenant-1", name, map[string]string{"value": "uno"})
	})

	t.Run("a hand delete of the host copy is recreated", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: hostNS("tenant-1", "default"), Name: name}}
		if err := shared.Host.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
		recreated := expectHostConfigMap(t, "tenant-1", name, map[string]string{"value": "uno"})
		if string(recreated.UID) == uid1 {
			t.Fatal("host copy was not recreated")
		}
	})

	t.Run("a tenant delete removes the host copy", func(t *testing.T) {
		if err := shared.Tenants["tenant-2"].Delete(ctx, configMap(name, nil)); err != nil {
			t.Fatal(err)
		}
		shared.ExpectHostGone(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: hostNS("tenant-2", "default"), Name: name}})
		expectHostConfigMap(t, "tenant-1", name, map[string]string{"value": "uno"})
	})
}

// A host copy whose tenant object is gone is removed; one made for an
// earlier tenant object of the same name is replaced, not merged into.
func TestOrphansAndStaleCopies(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	ns := hostNS("tenant-1", "default")
	ensureHostCopyNamespace(t)

	orphan := hostCopy(ns, unique("orphan"), "tenant-1", "no-such-uid", map[string]string{"left": "behind"})
	if err := shared.Host.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	shared.ExpectHostGone(t, orphan)

	name := unique("stale")
	stale := hostCopy(ns, name, "tenant-1", "uid-of-an-earlier-object", map[string]string{"stale": "yes"})
	if err := shared.Host.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if err := shared.Tenants["tenant-1"].Create(ctx, configMap(name, map[string]string{"fresh": "yes"})); err != nil {
		t.Fatal(err)
	}
	replaced := expectHostConfigMap(t, "tenant-1", name, map[string]string{"fresh": "yes"})
	if replaced.UID == stale.UID {
		t.Fatal("the stale host copy was merged into, not replaced")
	}
}

// Host objects without Tenantry's labels are never touched.
func TestForeignHostObjectsAreLeftAlone(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	ensureHostCopyNamespace(t)
	name := unique("foreign")
	foreign := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: hostNS("tenant-1", "default"), Name: name},
		Data:       map[string]string{"owner": "someone else"},
	}
	if err := shared.Host.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	tenantCM := configMap(name, map[string]string{"owner": "tenant"})
	if err := shared.Tenants["tenant-1"].Create(ctx, tenantCM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "HostConflict event on the tenant ConfigMap", func(ctx context.Context) (bool, error) {
		var list eventsv1.EventList
		if err := shared.Tenants["tenant-1"].List(ctx, &list, client.InNamespace("default")); err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == "HostConflict" {
				return true, nil
			}
		}
		return false, nil
	})
	var after corev1.ConfigMap
	if err := shared.Host.Get(ctx, client.ObjectKeyFromObject(foreign), &after); err != nil {
		t.Fatal(err)
	}
	if after.Data["owner"] != "someone else" || after.ResourceVersion != foreign.ResourceVersion {
		t.Fatalf("foreign host object changed: %v", after.Data)
	}
	// Deleting the tenant object leaves the foreign one too.
	if err := shared.Tenants["tenant-1"].Delete(ctx, tenantCM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "tenant object gone", func(ctx context.Context) (bool, error) {
		err := shared.Tenants["tenant-1"].Get(ctx, client.ObjectKeyFromObject(tenantCM), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), nil
	})
	if err := shared.Host.Get(ctx, client.ObjectKeyFromObject(foreign), &after); err != nil {
		t.Fatalf("foreign host object deleted: %v", err)
	}
}

// A host copy that someone took Tenantry's cluster label off (its update
// then reaches no tenant) is known by its annotations: the patroller finds
// it, and the sync gives the label back and repairs its data.
func TestCopyThatLostItsClusterLabelIsTakenBack(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	name := unique("unlabelled")
	if err := shared.Tenants["tenant-1"].Create(ctx, configMap(name, map[string]string{"k": "v"})); err != nil {
		t.Fatal(err)
	}
	hostCopy := expectHostConfigMap(t, "tenant-1", name, map[string]string{"k": "v"})
	patch := []byte(`{"metadata":{"labels":{"` + syncer.LabelCluster + `":null}},"data":{"k":"drifted"}}`)
	if err := shared.Host.Patch(ctx, hostCopy, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the label and the data back", func(ctx context.Context) (bool, error) {
		if err := shared.Host.Get(ctx, client.ObjectKeyFromObject(hostCopy), hostCopy); err != nil {
			return false, err
		}
		return hostCopy.Labels[syncer.LabelCluster] == "tenant-1" && hostCopy.Data["k"] == "v",
			fmt.Errorf("labels %v, data %v", hostCopy.Labels, hostCopy.Data)
	})
}

// A tenant Service keeps its own cluster IP: its host copy asks for it.
// Where the host has given that IP to another Service, the host copy takes
// one the host picks, and the tenant Service is given it.
func TestServiceGetsHostClusterIP(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	// Two IPs free in the host and the tenant (envtest's range,
	// 10.0.0.0/24, is both's), from the top, where allocations rarely go.
	var free []string
	taken := map[string]bool{}
	for _, c := range []client.Client{shared.Host, tenant} {
		var list corev1.ServiceList
		if err := c.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Items {
			taken[s.Spec.ClusterIP] = true
		}
	}
	for i := 254; i > 200 && len(free) < 2; i-- {
		if ip := fmt.Sprintf("10.0.0.%d", i); !taken[ip] {
			free = append(free, ip)
		}
	}
	if len(free) < 2 {
		t.Fatalf("no two free IPs in 10.0.0.201-254: %v", taken)
	}
	service := func(name, ip string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{
				ClusterIP:   ip,
				Selector:    map[string]string{"app": "web"},
				Ports:       []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
				ExternalIPs: []string{"203.0.113.9"},
			},
		}
	}

	kept := service(unique("svc"), free[0])
	if err := tenant.Create(ctx, kept); err != nil {
		t.Fatal(err)
	}
	hostSvc := shared.ExpectHostCopy(t, &corev1.Service{}, "tenant-2", "default", kept.Name).(*corev1.Service)
	if len(hostSvc.Spec.ExternalIPs) != 0 {
		t.Errorf("host Service claims external IPs %v", hostSvc.Spec.ExternalIPs)
	}
	if hostSvc.Spec.ClusterIP != free[0] {
		t.Errorf("host copy's cluster IP %s, want the tenant's, %s", hostSvc.Spec.ClusterIP, free[0])
	}
	// The tenant Service never changed: no swap through ExternalName.
	tenantrytest.Consistently(t, 2*time.Second, 200*time.Millisecond, "the tenant Service as created", func(ctx context.Context) (bool, error) {
		var s corev1.Service
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(kept), &s); err != nil {
			return false, err
		}
		return s.ResourceVersion == kept.ResourceVersion && s.Spec.ClusterIP == free[0] && s.Spec.Type == corev1.ServiceTypeClusterIP,
			fmt.Errorf("tenant: resourceVersion %s (created at %s), type %s, IP %s, annotations %v", s.ResourceVersion, kept.ResourceVersion, s.Spec.Type, s.Spec.ClusterIP, s.Annotations)
	})

	// The host's own Service takes the second IP first.
	squatter := service(unique("host-own"), free[1])
	squatter.Spec.ExternalIPs = nil
	if err := shared.Host.Create(ctx, squatter); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Host.Delete(context.Background(), squatter) })
	moved := service(unique("svc"), free[1])
	if err := tenant.Create(ctx, moved); err != nil {
		t.Fatal(err)
	}
	tenantUID := moved.UID
	hostSvc = shared.ExpectHostCopy(t, &corev1.Service{}, "tenant-2", "default", moved.Name).(*corev1.Service)
	if hostSvc.Spec.ClusterIP == free[1] || hostSvc.Spec.ClusterIP == "" {
		t.Fatalf("host copy's cluster IP %q: want one the host picked", hostSvc.Spec.ClusterIP)
	}
	eventually(t, 10*time.Second, "tenant Service has the host's cluster IP "+hostSvc.Spec.ClusterIP, func(ctx context.Context) (bool, error) {
		var s corev1.Service
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(moved), &s); err != nil {
			return false, err
		}
		ok := s.Spec.ClusterIP == hostSvc.Spec.ClusterIP && s.Spec.Type == corev1.ServiceTypeClusterIP && s.UID == tenantUID
		return ok, fmt.Errorf("tenant: type %s, IP %s, annotations %v", s.Spec.Type, s.Spec.ClusterIP, s.Annotations)
	})
	var after corev1.Service
	if err := shared.Host.Get(ctx, client.ObjectKeyFromObject(hostSvc), &after); err != nil {
		t.Fatal(err)
	}
	if after.Spec.ClusterIP != hostSvc.Spec.ClusterIP || after.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Fatalf("host Service changed while the tenant took its IP: %s %s", after.Spec.Type, after.Spec.ClusterIP)
	}
}

// While one tenant creates 2,000 ConfigMaps at once, a ConfigMap of the
// other still reaches the host within 2 seconds.
func TestFairness(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	cfg := shared.Env.Tenants[0].Config()
	cfg.QPS, cfg.Burst = 5000, 5000
	busy, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := unique("flood")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < 2000; i += 16 {
				if err := busy.Create(ctx, configMap(fmt.Sprintf("%s-%d", prefix, i), map[string]string{"i": fmt.Sprint(i)})); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// Wait until the flood is well under way in the host.
	eventually(t, 30*time.Second, "flood reaching the host", func(ctx context.Context) (bool, error) {
		var list corev1.ConfigMapList
		if err := shared.Host.List(ctx, &list, client.InNamespace(hostNS("tenant-1", "default"))); err != nil {
			return false, err
		}
		n := 0
		for _, cm := range list.Items {
			if strings.HasPrefix(cm.Name, prefix) {
				n++
			}
		}
		return n >= 50, nil
	})

	quiet := unique("quiet")
	began := time.Now()
	if err := shared.Tenants["tenant-2"].Create(ctx, configMap(quiet, map[string]string{"v": "1"})); err != nil {
		t.Fatal(err)
	}
	expectHostConfigMap(t, "tenant-2", quiet, map[string]string{"v": "1"})
	latency := time.Since(began)
	t.Logf("quiet tenant's ConfigMap reached the host in %s during the flood", latency)
	if latency > 2*time.Second {
		t.Fatalf("quiet tenant's ConfigMap took %s, want at most 2s", latency)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// ensureHostCopyNamespace makes sure tenant-1's default host namespace
// exists, by syncing a ConfigMap into it.
func ensureHostCopyNamespace(t *testing.T) {
	t.Helper()
	name := unique("ns-opener")
	if err := shared.Tenants["tenant-1"].Create(t.Context(), configMap(name, map[string]string{"k": "v"})); err != nil {
		t.Fatal(err)
	}
	expectHostConfigMap(t, "tenant-1", name, map[string]string{"k": "v"})
}

// hostCopy is a host ConfigMap labelled and annotated as Tenantry's copy of
// tenant ConfigMap default/name with the given UID.
func hostCopy(ns, name, cluster, uid string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{syncer.LabelManagedBy: syncer.ManagedByValue, syncer.LabelCluster: cluster},
			Annotations: map[string]string{
				syncer.AnnotationTenantNamespace: "default",
				syncer.AnnotationTenantName:      name,
				syncer.AnnotationTenantUID:       uid,
			},
		},
		Data: data,
	}
}

func TestSecretsServiceAccountsAndClaims(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	secretName, tokenName, saName, pvcName := unique("creds"), unique("token"), unique("robot"), unique("data")
	objects := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: secretName}, StringData: map[string]string{"password": "s3cret"}},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: tokenName, Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type:       corev1.SecretTypeServiceAccountToken,
		},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: saName}},
		&corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: pvcName},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				VolumeName:  "someone-elses-volume",
				Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"owner": "someone-else"}},
			},
		},
	}
	for _, o := range objects {
		if err := tenant.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	secret := shared.ExpectHostCopy(t, &corev1.Secret{}, "tenant-1", "default", secretName).(*corev1.Secret)
	if string(secret.Data["password"]) != "s3cret" {
		t.Errorf("host Secret data = %v", secret.Data)
	}
	shared.ExpectHostCopy(t, &corev1.ServiceAccount{}, "tenant-1", "default", saName)
	pvc := shared.ExpectHostCopy(t, &corev1.PersistentVolumeClaim{}, "tenant-1", "default", pvcName).(*corev1.PersistentVolumeClaim)
	if pvc.Spec.VolumeName != "" || pvc.Spec.Selector != nil {
		t.Errorf("host claim picks host volumes: volumeName %q, selector %v", pvc.Spec.VolumeName, pvc.Spec.Selector)
	}
	// Everything else of the namespace is synced by now; the token is not.
	err := shared.Host.Get(ctx, client.ObjectKey{Namespace: hostNS("tenant-1", "default"), Name: tokenName}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("service account token Secret synced to the host: %v", err)
	}

	// A host administrator provides a volume for the host claim; the host's
	// volume controller binds the two, and the tenant claim reports Bound.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: unique("volume")},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/" + pvcName}},
			ClaimRef:               &corev1.ObjectReference{Namespace: pvc.Namespace, Name: pvc.Name},
		},
	}
	if err := shared.Host.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Host.Delete(context.Background(), pv) })
	eventually(t, 30*time.Second, "tenant claim Bound", func(ctx context.Context) (bool, error) {
		var c corev1.PersistentVolumeClaim
		if err := tenant.Get(ctx, client.ObjectKey{Namespace: "default", Name: pvcName}, &c); err != nil {
			return false, err
		}
		return c.Status.Phase == corev1.ClaimBound, fmt.Errorf("phase %q", c.Status.Phase)
	})
}

// A tenant namespace's host namespace is created with its first object and
// deleted with the tenant namespace.
func TestNamespaceLifecycle(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: unique("team")}}
	if err := tenant.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	hostNamespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostNS("tenant-2", ns.Name)}}
	// No object yet, no host namespace: they are made on demand.
	if err := shared.Host.Get(ctx, client.ObjectKeyFromObject(hostNamespace), hostNamespace); !apierrors.IsNotFound(err) {
		t.Fatalf("host namespace made before any object: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "first"}}
	if err := tenant.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "host namespace and copy", func(ctx context.Context) (bool, error) {
		err := shared.Host.Get(ctx, client.ObjectKey{Namespace: hostNamespace.Name, Name: "first"}, &corev1.ConfigMap{})
		return err == nil, err
	})

	// The tenant namespace's labels, under Tenantry's own keys, in step
	// (what the translation of its NetworkPolicies' namespace selectors
	// selects on); never as written.
	labelTenantNamespace := func(labels map[string]string, what string, want func(host map[string]string) bool) {
		t.Helper()
		patch := client.MergeFrom(ns.DeepCopy())
		ns.Labels = labels
		if err := tenant.Patch(ctx, ns, patch); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, what, func(ctx context.Context) (bool, error) {
			if err := shared.Host.Get(ctx, client.ObjectKeyFromObject(hostNamespace), hostNamespace); err != nil {
				return false, err
			}
			return want(hostNamespace.Labels), fmt.Errorf("labels %v", hostNamespace.Labels)
		})
	}
	labelTenantNamespace(map[string]string{"team": "data"}, "the tenant namespace's labels on the host namespace", func(l map[string]string) bool {
		return l[netpol.NamespaceLabelKey("team")] == "data" && l[netpol.NamespaceLabelKey(corev1.LabelMetadataName)] == ns.Name && l["team"] == ""
	})
	labelTenantNamespace(map[string]string{"tier": "1"}, "a label removed in the tenant gone from the host namespace", func(l map[string]string) bool {
		_, team := l[netpol.NamespaceLabelKey("team")]
		return !team && l[netpol.NamespaceLabelKey("tier")] == "1"
	})

	// The tenant's namespace controller empties the namespace and removes
	// it; the host namespace goes with it, emptied by the host's.
	if err := tenant.Delete(ctx, ns); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "tenant and host namespaces gone", func(ctx context.Context) (bool, error) {
		tenantErr := tenant.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
		hostErr := shared.Host.Get(ctx, client.ObjectKeyFromObject(hostNamespace), &corev1.Namespace{})
		return apierrors.IsNotFound(tenantErr) && apierrors.IsNotFound(hostErr), fmt.Errorf("tenant: %v; host: %v", tenantErr, hostErr)
	})
}

// A label removed in the tenant goes from the host copy, while a label the
// host added stays; annotations that steer host add-ons never reach it.
// (tenant-2: TestFairness leaves tenant-1's queue long.)
func TestMetadataRemovalsReachTheHost(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	cm := configMap(unique("labelled"), map[string]string{"k": "v"})
	cm.Labels = map[string]string{"app": "web", "tier": "front"}
	cm.Annotations = map[string]string{"k8s.v1.cni.cncf.io/networks": "host-net", "team": "blue"}
	if err := tenant.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	hostKey := shared.HostKey("tenant-2", cm.Namespace, cm.Name)
	var host corev1.ConfigMap
	eventually(t, 10*time.Second, "the host copy with the tenant's labels", func(ctx context.Context) (bool, error) {
		if err := shared.Host.Get(ctx, hostKey, &host); err != nil {
			return false, err
		}
		return host.Labels["tier"] == "front" && host.Annotations["team"] == "blue", fmt.Errorf("labels %v", host.Labels)
	})
	if _, ok := host.Annotations["k8s.v1.cni.cncf.io/networks"]; ok {
		t.Fatal("a Multus network annotation reached the host")
	}
	host.Labels["host-added"] = "yes"
	if err := shared.Host.Update(ctx, &host); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "label tier removed in the tenant", func(ctx context.Context) (bool, error) {
		var c corev1.ConfigMap
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(cm), &c); err != nil {
			return false, err
		}
		delete(c.Labels, "tier")
		err := tenant.Update(ctx, &c)
		return err == nil, err
	})
	eventually(t, 10*time.Second, "tier gone from the host copy, host-added kept", func(ctx context.Context) (bool, error) {
		if err := shared.Host.Get(ctx, hostKey, &host); err != nil {
			return false, err
		}
		_, tier := host.Labels["tier"]
		return !tier && host.Labels["host-added"] == "yes" && host.Labels["app"] == "web", fmt.Errorf("labels %v", host.Labels)
	})
}

// A host writer (a controller, a mutating webhook) that adds a field to a
// host copy keeps it: syncs that follow, for a change of the tenant's
// metadata, write their own fields only, and neither side writes again.
// What the tenant removes still goes. (tenant-2, as above.)
func TestHostWritersAreNotFoughtOver(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	cm := configMap(unique("defaulted"), map[string]string{"a": "1", "b": "1"})
	if err := tenant.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	hostKey := shared.HostKey("tenant-2", cm.Namespace, cm.Name)
	expectHostConfigMap(t, "tenant-2", cm.Name, cm.Data)

	// The host's "controller": it puts data key injected back whenever it
	// is missing, and counts its writes.
	injections := runHostWriter(t, hostKey, &corev1.ConfigMap{}, func(o client.Object) bool {
		cm := o.(*corev1.ConfigMap)
		if cm.Data["injected"] != "" {
			return false
		}
		cm.Data["injected"] = "by-the-host"
		return true
	})

	hostHas := func(what string, ok func(*corev1.ConfigMap) bool) {
		t.Helper()
		eventually(t, 10*time.Second, what, func(ctx context.Context) (bool, error) {
			var host corev1.ConfigMap
			if err := shared.Host.Get(ctx, hostKey, &host); err != nil {
				return false, err
			}
			return ok(&host), fmt.Errorf("labels %v, data %v", host.Labels, host.Data)
		})
	}
	updateTenant := func(what string, change func(*corev1.ConfigMap)) {
		t.Helper()
		eventually(t, 10*time.Second, what, func(ctx context.Context) (bool, error) {
			var c corev1.ConfigMap
			if err := tenant.Get(ctx, client.ObjectKeyFromObject(cm), &c); err != nil {
				return false, err
			}
			change(&c)
			err := tenant.Update(ctx, &c)
			return err == nil, err
		})
	}

	hostHas("the host's key in the host copy", func(h *corev1.ConfigMap) bool { return h.Data["injected"] != "" })
	updateTenant("a label added in the tenant", func(c *corev1.ConfigMap) { c.Labels = map[string]string{"touched": "1"} })
	hostHas("the tenant's label beside the host's key", func(h *corev1.ConfigMap) bool {
		return h.Labels["touched"] == "1" && h.Data["injected"] == "by-the-host"
	})
	if n := injections.Load(); n != 1 {
		t.Fatalf("the host writer wrote %d times; want once: Tenantry took its key away", n)
	}

	// A change of the tenant's own data is written whole, and a key the
	// tenant removed goes.
	updateTenant("key b removed and a changed in the tenant", func(c *corev1.ConfigMap) {
		delete(c.Data, "b")
		c.Data["a"] = "2"
	})
	hostHas("a changed, b gone, the host's key back", func(h *corev1.ConfigMap) bool {
		_, b := h.Data["b"]
		return h.Data["a"] == "2" && !b && h.Data["injected"] == "by-the-host"
	})
	before := injections.Load()
	updateTenant("another label in the tenant", func(c *corev1.ConfigMap) { c.Labels["touched"] = "2" })
	hostHas("the second label", func(h *corev1.ConfigMap) bool {
		return h.Labels["touched"] == "2" && h.Data["injected"] == "by-the-host"
	})
	if n := injections.Load(); n != before {
		t.Fatalf("the host writer wrote %d more times after a label change; want none", n-before)
	}
}

// A host writer that adds an element to a list of a host copy (here a pull
// secret of a ServiceAccount, as some distributions' controllers do) keeps
// it, and neither side writes again when the tenant's metadata changes.
func TestHostListAdditionsAreNotFoughtOver(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	ns := "default"
	sa := &corev1.ServiceAccount{
		ObjectMeta:       metav1.ObjectMeta{Namespace: ns, Name: unique("puller")},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "tenant-pull"}},
	}
	if err := tenant.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	hostKey := shared.HostKey("tenant-2", ns, sa.Name)
	additions := runHostWriter(t, hostKey, &corev1.ServiceAccount{}, func(o client.Object) bool {
		h := o.(*corev1.ServiceAccount)
		if slices.Contains(h.ImagePullSecrets, corev1.LocalObjectReference{Name: "host-pull"}) {
			return false
		}
		h.ImagePullSecrets = append(h.ImagePullSecrets, corev1.LocalObjectReference{Name: "host-pull"})
		return true
	})
	hostPulls := func(what string, ok func(*corev1.ServiceAccount) bool) {
		t.Helper()
		eventually(t, 10*time.Second, what, func(ctx context.Context) (bool, error) {
			var h corev1.ServiceAccount
			if err := shared.Host.Get(ctx, hostKey, &h); err != nil {
				return false, err
			}
			return ok(&h), fmt.Errorf("labels %v, pull secrets %v", h.Labels, h.ImagePullSecrets)
		})
	}
	both := []corev1.LocalObjectReference{{Name: "tenant-pull"}, {Name: "host-pull"}}
	hostPulls("the host's pull secret after the tenant's", func(h *corev1.ServiceAccount) bool {
		return slices.Equal(h.ImagePullSecrets, both)
	})
	eventually(t, 10*time.Second, "a label added in the tenant", func(ctx context.Context) (bool, error) {
		var c corev1.ServiceAccount
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(sa), &c); err != nil {
			return false, err
		}
		c.Labels = map[string]string{"touched": "1"}
		err := tenant.Update(ctx, &c)
		return err == nil, err
	})
	hostPulls("the tenant's label, both pull secrets", func(h *corev1.ServiceAccount) bool {
		return h.Labels["touched"] == "1" && slices.Equal(h.ImagePullSecrets, both)
	})
	if n := additions.Load(); n != 1 {
		t.Fatalf("the host writer wrote %d times; want once: Tenantry took its pull secret away", n)
	}
}

// runHostWriter runs, until the test ends, a host "controller" that reads
// the object at key into obj every 20 ms and writes it back whenever edit
// changed it; it returns the count of its writes.
func runHostWriter(t *testing.T, key client.ObjectKey, obj client.Object, edit func(client.Object) bool) *atomic.Int32 {
	t.Helper()
	var writes atomic.Int32
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			o := obj.DeepCopyObject().(client.Object)
			if err := shared.Host.Get(ctx, key, o); err != nil || !edit(o) {
				return false, nil
			}
			if shared.Host.Update(ctx, o) == nil {
				writes.Add(1)
			}
			return false, nil
		})
	}()
	t.Cleanup(func() { stop(); <-done })
	return &writes
}
