package virtualcluster

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// failingReader answers reads of Secrets with the error it holds, if any:
// a 429 as a host API server under load does, a 403 as one whose RBAC is
// being rolled out.
type failingReader struct {
	client.Reader
	err atomic.Pointer[error]
	// secretReads counts the reads of Secrets.
	secretReads atomic.Int32
}

func (r *failingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, secret := obj.(*corev1.Secret); secret {
		r.secretReads.Add(1)
		if err := r.err.Load(); err != nil {
			return *err
		}
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// startHost starts a host with the VirtualCluster CRD, and tenants.
func startHost(t *testing.T, tenants int) (*tenantrytest.Environment, client.Client) {
	t.Helper()
	env := tenantrytest.New(t, tenantrytest.Options{
		Tenants:               tenants,
		HostCRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, tenantryv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	host, err := client.New(env.Host.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, host
}

// createVirtualCluster creates in the host a VirtualCluster named name and
// its kubeconfig Secret, of the same name in namespace default.
func createVirtualCluster(t *testing.T, host client.Client, name string, kubeconfig []byte) (*corev1.Secret, *tenantryv1alpha1.VirtualCluster) {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: map[string][]byte{"kubeconfig": kubeconfig}}
	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       tenantryv1alpha1.VirtualClusterSpec{KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: name}},
	}
	for _, o := range []client.Object{secret, vc} {
		if err := host.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	return secret, vc
}

// newReconciler is a Reconciler on host, reading Secrets through reader,
// with a registry of its own that the test's end closes.
func newReconciler(t *testing.T, host client.Client, reader client.Reader) (*Reconciler, *clusterregistry.RemoteClusterRegistry) {
	t.Helper()
	registry := clusterregistry.New(logr.Discard(), host)
	t.Cleanup(func() { _ = registry.Close(context.Background()) })
	return &Reconciler{Client: host, APIReader: reader, Registry: registry, Recorder: events.NewFakeRecorder(100)}, registry
}

// A VirtualCluster's name is a label value on every host object made for
// it: the API server refuses one longer than a label value may be.
func TestLongNamesAreRefused(t *testing.T) {
	_, host := startHost(t, 0)
	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 64)},
		Spec:       tenantryv1alpha1.VirtualClusterSpec{KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "x"}},
	}
	err := host.Create(t.Context(), vc)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "at most 63 characters") {
		t.Fatalf("a 64-character name: %v; want Invalid, saying why", err)
	}
	vc.Name = strings.Repeat("a", 63)
	if err := host.Create(t.Context(), vc); err != nil {
		t.Fatalf("a 63-character name: %v", err)
	}
}

// A host that cannot serve the kubeconfig Secret for a moment, or refuses
// it to the manager, does not stop a running tenant; a Secret that is gone
// does.
func TestTransientSecretReadErrorsKeepTheTenantRunning(t *testing.T) {
	env, host := startHost(t, 1)
	kubeconfig, err := env.Tenants[0].Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	secret, vc := createVirtualCluster(t, host, "t1", kubeconfig)
	reader := &failingReader{Reader: host}
	r, registry := newReconciler(t, host, reader)
	reconcile := func() error {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: vc.Name}})
		return err
	}
	running := func() bool {
		status, err := registry.Status(vc.Name)
		return err == nil && status.State == clusterregistry.StateRunning
	}
	readyStatus := func() metav1.ConditionStatus {
		var got tenantryv1alpha1.VirtualCluster
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), &got); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, tenantryv1alpha1.ConditionReady); c != nil {
			return c.Status
		}
		return metav1.ConditionUnknown
	}

	if err := reconcile(); err != nil || !running() {
		t.Fatalf("first reconcile: %v, running %v", err, running())
	}
	// A version of the Secret read before is not read again.
	reads := reader.secretReads.Load()
	if err := reconcile(); err != nil || !running() {
		t.Fatalf("second reconcile: %v, running %v", err, running())
	}
	if n := reader.secretReads.Load() - reads; n != 0 {
		t.Errorf("an unchanged Secret was read %d more times", n)
	}
	for _, failure := range []error{
		apierrors.NewTooManyRequests("the host is busy", 1),
		apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, secret.Name, errors.New("RBAC is being rolled out")),
	} {
		// A new version of the Secret, which must be read (a version read
		// before is not read again).
		patch := client.MergeFrom(secret.DeepCopy())
		metav1.SetMetaDataAnnotation(&secret.ObjectMeta, "touched", failure.Error())
		if err := host.Patch(ctx, secret, patch); err != nil {
			t.Fatal(err)
		}
		reader.err.Store(&failure)
		if err := reconcile(); err == nil {
			t.Errorf("%v: the Secret read was not retried", failure)
		}
		if !running() || readyStatus() != metav1.ConditionTrue {
			t.Fatalf("%v: the tenant stopped (running %v, Ready %s)", failure, running(), readyStatus())
		}
	}
	reader.err.Store(nil)
	if err := host.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := reconcile(); err == nil || running() || readyStatus() != metav1.ConditionFalse {
		t.Fatalf("a deleted Secret: %v, running %v, Ready %s; want the tenant stopped", err, running(), readyStatus())
	}
}

// A kubeconfig that reaches the host itself is refused: syncing the host
// into itself would copy its copies without end.
func TestKubeconfigOfTheHostIsRefused(t *testing.T) {
	env, host := startHost(t, 0)
	ctx := t.Context()
	kubeconfig, err := env.Host.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	_, vc := createVirtualCluster(t, host, "loop", kubeconfig)
	r, registry := newReconciler(t, host, host)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: vc.Name}}); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.Status(vc.Name); err == nil {
		t.Fatal("a VirtualCluster of the host itself runs")
	}
	if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tenantryv1alpha1.ReasonHostCluster {
		t.Fatalf("Ready = %+v, want False with reason %s", c, tenantryv1alpha1.ReasonHostCluster)
	}
	t.Logf("Ready=False %s: %s", c.Reason, c.Message)
}
