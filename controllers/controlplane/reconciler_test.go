package controlplane_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tenantry/tenantry/controllers/controlplane"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	cp "github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/pki"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// The controller against a real host API server, with no node to run the
// control planes: what it makes, and the clear condition and Warning Event
// that bad input gets.
func TestControlPlaneObjectsAndBadInput(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{
		HostCRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, tenantryv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := ctrl.NewManager(env.Host.Config(), ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	opts := controlplane.DefaultOptions()
	opts.ActivityBindAddress = "127.0.0.1:0"
	opts.StoragePolicy = func(vc *tenantryv1alpha1.VirtualCluster) pods.StoragePolicy {
		return pods.StoragePolicy{AllowedStorageClasses: []string{"fast"}}
	}
	app := fx.New(fx.NopLogger, fx.Supply(fx.Annotate(mgr, fx.As(new(ctrl.Manager)))), fx.Supply(opts), controlplane.Module)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager: %v", err)
		}
	})
	host := mgr.GetClient()
	create := func(name string, spec tenantryv1alpha1.ControlPlaneSpec) {
		t.Helper()
		vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: name + "-kubeconfig"},
			ControlPlane:        &spec,
		}}
		if err := host.Create(t.Context(), vc); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(name, reason, says string) {
		t.Helper()
		tenantrytest.Eventually(t, 30*time.Second, name+": ControlPlaneReady "+reason, func(ctx context.Context) (bool, error) {
			var vc tenantryv1alpha1.VirtualCluster
			if err := host.Get(ctx, client.ObjectKey{Name: name}, &vc); err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady)
			return c != nil && c.Reason == reason && strings.Contains(c.Message, says), fmt.Errorf("condition %+v", c)
		})
		if reason == tenantryv1alpha1.ReasonControlPlaneProvisioning {
			return
		}
		tenantrytest.Eventually(t, 30*time.Second, name+": a Warning Event "+reason, func(ctx context.Context) (bool, error) {
			var list eventsv1.EventList
			if err := host.List(ctx, &list); err != nil {
				return false, err
			}
			for _, e := range list.Items {
				if e.Regarding.Name == name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
					return true, nil
				}
			}
			return false, nil
		})
	}

	create("unknown-version", tenantryv1alpha1.ControlPlaneSpec{Version: "v1.99.0"})
	expect("unknown-version", tenantryv1alpha1.ReasonUnknownVersion, "v1.99.0 is not one this manager runs")
	create("refused-class", tenantryv1alpha1.ControlPlaneSpec{Storage: tenantryv1alpha1.ControlPlaneStorage{StorageClassName: ptr.To("slow")}})
	expect("refused-class", tenantryv1alpha1.ReasonStorageRefused, `StorageClass "slow"`)
	taken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "taken-kubeconfig"}, StringData: map[string]string{"kubeconfig": "someone's"}}
	if err := host.Create(t.Context(), taken); err != nil {
		t.Fatal(err)
	}
	create("taken", tenantryv1alpha1.ControlPlaneSpec{})
	expect("taken", tenantryv1alpha1.ReasonSecretTaken, "default/taken-kubeconfig")
	if err := host.Get(t.Context(), client.ObjectKeyFromObject(taken), taken); err != nil || string(taken.Data["kubeconfig"]) != "someone's" {
		t.Errorf("the taken Secret was changed: %v", err)
	}

	// Good input: everything is made, and waits for nodes to run it.
	create("good", tenantryv1alpha1.ControlPlaneSpec{Storage: tenantryv1alpha1.ControlPlaneStorage{StorageClassName: ptr.To("fast")}})
	expect("good", tenantryv1alpha1.ReasonControlPlaneProvisioning, "")
	ns := cp.Namespace("good")
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cp.WorkloadName}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cp.ServiceName}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cp.NetworkPolicyName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cp.PKISecretName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "good-kubeconfig"}},
	} {
		tenantrytest.Eventually(t, 30*time.Second, fmt.Sprintf("%T %s", o, o.GetName()), func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, client.ObjectKeyFromObject(o), o)
			return err == nil, err
		})
	}
	var policy networkingv1.NetworkPolicy
	if err := host.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: cp.NetworkPolicyName}, &policy); err != nil {
		t.Fatal(err)
	}
	if len(policy.Spec.Egress) == 0 || len(policy.Spec.Egress[len(policy.Spec.Egress)-1].To) == 0 ||
		len(policy.Spec.Egress[len(policy.Spec.Egress)-1].To[0].IPBlock.Except) == 0 {
		t.Errorf("the control plane's egress %+v: want the host API server and cloud metadata kept out", policy.Spec.Egress)
	}

	// What the controller applied is not sent again while unchanged, but
	// a change by hand is undone: at once for a watched kind (the
	// Service), within a minute for another.
	var svc corev1.Service
	if err := host.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: cp.ServiceName}, &svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports[0].TargetPort = intstr.FromInt32(7443)
	if err := host.Update(t.Context(), &svc); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 30*time.Second, "the Service changed by hand is applied again", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(&svc), &svc); err != nil {
			return false, err
		}
		return svc.Spec.Ports[0].TargetPort.IntValue() == cp.APIServerPort, fmt.Errorf("ports %+v", svc.Spec.Ports)
	})

	// A namespace of its name that is not its own is never taken over.
	if err := host.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.Namespace("squatted")}}); err != nil {
		t.Fatal(err)
	}
	create("squatted", tenantryv1alpha1.ControlPlaneSpec{})
	expect("squatted", tenantryv1alpha1.ReasonControlPlaneFailed, "is not this VirtualCluster's")

	// Storage fixed once made.
	var vc tenantryv1alpha1.VirtualCluster
	if err := host.Get(t.Context(), client.ObjectKey{Name: "good"}, &vc); err != nil {
		t.Fatal(err)
	}
	vc.Spec.ControlPlane.Storage.StorageClassName = ptr.To("faster")
	if err := host.Update(t.Context(), &vc); err == nil || !strings.Contains(err.Error(), "storage.storageClassName cannot change") {
		t.Errorf("changing the storage class: %v, want refused", err)
	}
	vc.Spec.ControlPlane = nil
	if err := host.Update(t.Context(), &vc); err == nil || !strings.Contains(err.Error(), "spec.controlPlane can be neither added to nor removed") {
		t.Errorf("removing spec.controlPlane: %v, want refused", err)
	}

	// spec.sleep: on a control plane Tenantry runs alone, for a minute at
	// least; its API server then reports its requests to the manager.
	sleepy := tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "sleepy"}, Spec: tenantryv1alpha1.VirtualClusterSpec{
		KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "sleepy-kubeconfig"},
		Sleep:               &tenantryv1alpha1.SleepSpec{AfterInactivity: metav1.Duration{Duration: time.Minute}},
	}}
	if err := host.Create(t.Context(), sleepy.DeepCopy()); err == nil || !strings.Contains(err.Error(), "spec.sleep needs spec.controlPlane") {
		t.Errorf("spec.sleep without spec.controlPlane: %v, want refused", err)
	}
	sleepy.Spec.ControlPlane = &tenantryv1alpha1.ControlPlaneSpec{}
	sleepy.Spec.Sleep.AfterInactivity.Duration = 30 * time.Second
	if err := host.Create(t.Context(), sleepy.DeepCopy()); err == nil || !strings.Contains(err.Error(), "afterInactivity must be at least 1m") {
		t.Errorf("spec.sleep.afterInactivity 30s: %v, want refused", err)
	}
	sleepy.Spec.Sleep.AfterInactivity.Duration = time.Hour
	if err := host.Create(t.Context(), &sleepy); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 30*time.Second, "the API server of a tenant with spec.sleep reports its requests", func(ctx context.Context) (bool, error) {
		var sts appsv1.StatefulSet
		if err := host.Get(ctx, client.ObjectKey{Namespace: cp.Namespace("sleepy"), Name: cp.WorkloadName}, &sts); err != nil {
			return false, err
		}
		args := strings.Join(podContainer(sts.Spec.Template.Spec, "kube-apiserver").Command, " ")
		var pki corev1.Secret
		if err := host.Get(ctx, client.ObjectKey{Namespace: cp.Namespace("sleepy"), Name: cp.PKISecretName}, &pki); err != nil {
			return false, err
		}
		webhook := string(pki.Data[cp.KeyAuditWebhookKubeconfig])
		return strings.Contains(args, "--audit-webhook-config-file=") && strings.Contains(webhook, "https://127.0.0.1:") &&
			strings.Contains(webhook, cp.ActivityServerName("sleepy")) && len(pki.Data[cp.KeyActivityServingCert]) > 0, fmt.Errorf("args %s; webhook %s", args, webhook)
	})

	// spec.controlPlane.replicas: above one, not on Embedded storage;
	// three API servers spread over nodes, their controller-managers
	// leader-elected, one etcd member, and a PodDisruptionBudget.
	three := tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "three"}, Spec: tenantryv1alpha1.VirtualClusterSpec{
		KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "three-kubeconfig"},
		ControlPlane:        &tenantryv1alpha1.ControlPlaneSpec{Replicas: ptr.To[int32](3)},
	}}
	if err := host.Create(t.Context(), three.DeepCopy()); err == nil || !strings.Contains(err.Error(), "replicas above 1 needs storage.type Etcd or DataStore") {
		t.Errorf("3 replicas on Embedded storage: %v, want refused", err)
	}
	three.Spec.ControlPlane.Storage.Type = tenantryv1alpha1.StorageEtcd
	if err := host.Create(t.Context(), &three); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 30*time.Second, "three API servers, one etcd member, a PodDisruptionBudget", func(ctx context.Context) (bool, error) {
		var apiServers, etcd appsv1.StatefulSet
		if err := host.Get(ctx, client.ObjectKey{Namespace: cp.Namespace("three"), Name: cp.WorkloadName}, &apiServers); err != nil {
			return false, err
		}
		if err := host.Get(ctx, client.ObjectKey{Namespace: cp.Namespace("three"), Name: cp.EtcdName}, &etcd); err != nil {
			return false, err
		}
		var pdb policyv1.PodDisruptionBudget
		if err := host.Get(ctx, client.ObjectKey{Namespace: cp.Namespace("three"), Name: cp.WorkloadName}, &pdb); err != nil {
			return false, err
		}
		pod := apiServers.Spec.Template.Spec
		kcm := strings.Join(podContainer(pod, "kube-controller-manager").Command, " ")
		return *apiServers.Spec.Replicas == 3 && *etcd.Spec.Replicas == 1 && pod.Affinity != nil && pod.Affinity.PodAntiAffinity != nil &&
				strings.Contains(kcm, "--leader-elect=true") && pdb.Spec.MaxUnavailable.IntValue() == 1,
			fmt.Errorf("API servers %d, etcd %d, affinity %+v, controller-manager %s, budget %+v", *apiServers.Spec.Replicas, *etcd.Spec.Replicas, pod.Affinity, kcm, pdb.Spec)
	})

	// A VirtualCluster written without storage (as kubectl would) gets
	// the default, and its type cannot change later.
	bare := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": tenantryv1alpha1.GroupVersion.String(), "kind": "VirtualCluster",
		"metadata": map[string]any{"name": "bare"},
		"spec": map[string]any{
			"kubeconfigSecretRef": map[string]any{"namespace": "default", "name": "bare-kubeconfig"},
			"controlPlane":        map[string]any{},
		},
	}}
	if err := host.Create(t.Context(), bare); err != nil {
		t.Fatal(err)
	}
	for _, storage := range []string{`{"type":"Etcd"}`, `null`} {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"controlPlane":{"storage":`+storage+`}}}`))
		err := host.Patch(t.Context(), &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}, patch)
		if storage == "null" {
			// Removed: defaulted again, the same.
			if err != nil {
				t.Errorf("removing storage: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "storage.type cannot change") {
			t.Errorf("storage %s on a VirtualCluster made without: %v, want refused", storage, err)
		}
	}

	// Storage Etcd: an etcd of its own, apart, that only the control
	// plane's Pods reach, and its members each other.
	create("own-etcd", tenantryv1alpha1.ControlPlaneSpec{Storage: tenantryv1alpha1.ControlPlaneStorage{Type: tenantryv1alpha1.StorageEtcd}})
	expect("own-etcd", tenantryv1alpha1.ReasonControlPlaneProvisioning, "")
	ns = cp.Namespace("own-etcd")
	var etcdPolicy networkingv1.NetworkPolicy
	var members corev1.ConfigMap
	var member corev1.Service
	tenantrytest.Eventually(t, 30*time.Second, "own-etcd's etcd", func(ctx context.Context) (bool, error) {
		for _, o := range []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}} {
			if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: cp.EtcdName}, o); err != nil {
				return false, err
			}
		}
		if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: cp.EtcdMemberName(0)}, &member); err != nil {
			return false, err
		}
		if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: cp.EtcdConfigMapName}, &members); err != nil {
			return false, err
		}
		return true, host.Get(ctx, client.ObjectKey{Namespace: ns, Name: cp.EtcdName}, &etcdPolicy)
	})
	apiServers := cp.APIServerLabels("own-etcd")
	only := func(peers []networkingv1.NetworkPolicyPeer, labels map[string]string) bool {
		return len(peers) == 1 && peers[0].PodSelector != nil && peers[0].NamespaceSelector == nil && peers[0].IPBlock == nil &&
			maps.Equal(peers[0].PodSelector.MatchLabels, labels)
	}
	etcdPods := etcdPolicy.Spec.PodSelector.MatchLabels
	if in, out := etcdPolicy.Spec.Ingress, etcdPolicy.Spec.Egress; len(in) != 2 || !only(in[0].From, apiServers) || in[0].Ports[0].Port.IntValue() != cp.EtcdPort ||
		!only(in[1].From, etcdPods) || in[1].Ports[0].Port.IntValue() != cp.EtcdPeerPort ||
		len(out) != 1 || !only(out[0].To, etcdPods) || out[0].Ports[0].Port.IntValue() != cp.EtcdPeerPort || len(etcdPolicy.Spec.PolicyTypes) != 2 {
		t.Errorf("etcd's NetworkPolicy %+v: want its client port for the API servers alone, its peer port for its members alone, and no other egress", etcdPolicy.Spec)
	}
	// The first member starts a cluster of its own, at its Service.
	first := members.Data[cp.EtcdConfigFile(0)]
	for _, want := range []string{`"initial-cluster-state": "new"`, `"initial-cluster": "etcd-0=https://` + member.Spec.ClusterIP + `:2380"`, `"client-cert-auth": true`} {
		if !strings.Contains(first, want) {
			t.Errorf("etcd-0's configuration %s: want %s", first, want)
		}
	}
	if len(members.Data) != 1 || !member.Spec.PublishNotReadyAddresses {
		t.Errorf("etcd's members %v, Service %+v: want etcd-0 alone, at its Service, ready or not", slices.Collect(maps.Keys(members.Data)), member.Spec)
	}
	var pkiSecret corev1.Secret
	tenantrytest.Eventually(t, 30*time.Second, "own-etcd's etcd certificates", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: cp.PKISecretName}, &pkiSecret); err != nil {
			return false, err
		}
		return len(pkiSecret.Data[cp.KeyEtcdServerCert]) > 0 && len(pkiSecret.Data[cp.KeyEtcdClientCert]) > 0 && len(pkiSecret.Data[cp.KeyEtcdPeerCert]) > 0, nil
	})
	peer, err := pki.Parse(pkiSecret.Data[cp.KeyEtcdPeerCert], pkiSecret.Data[cp.KeyEtcdPeerKey], nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.Cert.VerifyHostname(member.Spec.ClusterIP); err != nil || !slices.Contains(peer.Cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("etcd's peer certificate: %v, usages %v: want etcd-0's address, to serve and be a client", err, peer.Cert.ExtKeyUsage)
	}

	// A DataStore is named for type DataStore, and only then.
	for name, storage := range map[string]tenantryv1alpha1.ControlPlaneStorage{
		"unnamed-store": {Type: tenantryv1alpha1.StorageDataStore},
		"stray-store":   {Type: tenantryv1alpha1.StorageEtcd, DataStore: "shared"},
		"store-claim":   {Type: tenantryv1alpha1.StorageDataStore, DataStore: "shared", Size: ptr.To(resource.MustParse("2Gi"))},
	} {
		vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: name},
			ControlPlane:        &tenantryv1alpha1.ControlPlaneSpec{Storage: storage},
		}}
		if err := host.Create(t.Context(), vc); err == nil || !strings.Contains(err.Error(), "storage.") {
			t.Errorf("%s (%+v): %v, want refused", name, storage, err)
		}
	}

	// Storage DataStore: one that does not exist, then one that does not
	// answer.
	create("no-store", tenantryv1alpha1.ControlPlaneSpec{Storage: tenantryv1alpha1.ControlPlaneStorage{Type: tenantryv1alpha1.StorageDataStore, DataStore: "nowhere"}})
	expect("no-store", tenantryv1alpha1.ReasonDataStoreUnavailable, "DataStore nowhere: no such DataStore")
	store := tenantrytest.NewEtcdDataStore(t, "127.0.0.1")
	if err := host.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shared-etcd"}, Data: store.Secret}); err != nil {
		t.Fatal(err)
	}
	for name, endpoint := range map[string]string{"shared": store.Endpoint, "down": "https://127.0.0.1:1"} {
		ds := &tenantryv1alpha1.DataStore{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tenantryv1alpha1.DataStoreSpec{Etcd: tenantryv1alpha1.EtcdDataStore{
			Endpoints: []string{endpoint}, SecretRef: tenantryv1alpha1.SecretReference{Namespace: "default", Name: "shared-etcd"},
		}}}
		if err := host.Create(t.Context(), ds); err != nil {
			t.Fatal(err)
		}
	}
	create("down-store", tenantryv1alpha1.ControlPlaneSpec{Storage: tenantryv1alpha1.ControlPlaneStorage{Type: tenantryv1alpha1.StorageDataStore, DataStore: "down"}})
	expect("down-store", tenantryv1alpha1.ReasonDataStoreUnavailable, "DataStore down: the DataStore's etcd does not answer")
	create("on-store", tenantryv1alpha1.ControlPlaneSpec{Storage: tenantryv1alpha1.ControlPlaneStorage{Type: tenantryv1alpha1.StorageDataStore, DataStore: "shared"}})
	expect("on-store", tenantryv1alpha1.ReasonControlPlaneProvisioning, "")
	for name, want := range map[string]struct {
		reason string
		users  int32
	}{"shared": {tenantryv1alpha1.ReasonDataStoreReachable, 1}, "down": {tenantryv1alpha1.ReasonDataStoreUnreachable, 1}} {
		tenantrytest.Eventually(t, 30*time.Second, "DataStore "+name+" "+want.reason, func(ctx context.Context) (bool, error) {
			var ds tenantryv1alpha1.DataStore
			if err := host.Get(ctx, client.ObjectKey{Name: name}, &ds); err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(ds.Status.Conditions, tenantryv1alpha1.ConditionReady)
			return c != nil && c.Reason == want.reason && ds.Status.ControlPlanes == want.users, fmt.Errorf("condition %+v, %d control planes", c, ds.Status.ControlPlanes)
		})
	}
	// on-store's API server is given its own user's certificate, of the
	// store's CA, and the store's CA certificate without its key.
	tenantrytest.Eventually(t, 30*time.Second, "on-store's etcd client certificate", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKey{Namespace: cp.Namespace("on-store"), Name: cp.PKISecretName}, &pkiSecret)
		return err == nil && len(pkiSecret.Data[cp.KeyEtcdClientCert]) > 0, err
	})
	if string(pkiSecret.Data[cp.KeyEtcdCACert]) != string(store.Secret["ca.crt"]) || len(pkiSecret.Data[cp.KeyEtcdCAKey]) > 0 {
		t.Error("on-store's PKI Secret: want the store's CA certificate, and not its key")
	}
	if _, err := store.Client(pkiSecret.Data[cp.KeyEtcdClientCert], pkiSecret.Data[cp.KeyEtcdClientKey]); err != nil {
		t.Errorf("on-store's etcd client certificate: %v", err)
	}

	// A DataStore that a control plane uses is held when deleted.
	if err := host.Delete(t.Context(), &tenantryv1alpha1.DataStore{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 30*time.Second, "DataStore shared held, InUse", func(ctx context.Context) (bool, error) {
		var ds tenantryv1alpha1.DataStore
		if err := host.Get(ctx, client.ObjectKey{Name: "shared"}, &ds); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ds.Status.Conditions, tenantryv1alpha1.ConditionReady)
		return c != nil && c.Reason == tenantryv1alpha1.ReasonDataStoreInUse && strings.Contains(c.Message, "1 control planes"), fmt.Errorf("condition %+v", c)
	})
}

// podContainer is pod's container or init container named name; a
// container of its own if it has none.
func podContainer(pod corev1.PodSpec, name string) corev1.Container {
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		if c.Name == name {
			return c
		}
	}
	return corev1.Container{}
}
