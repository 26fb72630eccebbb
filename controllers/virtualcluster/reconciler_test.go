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

// staleClient reads, while stale is set, that VirtualCluster in place of
// the one in the host: a cache that has not caught up. It counts the
// writes of VirtualClusters, and keeps each as the write left it.
type staleClient struct {
	client.Client
	stale   atomic.Pointer[tenantryv1alpha1.VirtualCluster]
	writes  atomic.Int32
	written []*tenantryv1alpha1.VirtualCluster
}

func (c *staleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if vc, ok := obj.(*tenantryv1alpha1.VirtualCluster); ok {
		if stale := c.stale.Load(); stale != nil && stale.Name == key.Name {
			stale.DeepCopyInto(vc)
			return nil
		}
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *staleClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	err := c.Client.Patch(ctx, obj, patch, opts...)
	c.count(obj, err)
	return err
}

func (c *staleClient) Status() client.SubResourceWriter { return staleStatus{c} }

func (c *staleClient) count(obj client.Object, err error) {
	if vc, ok := obj.(*tenantryv1alpha1.VirtualCluster); ok && err == nil {
		c.writes.Add(1)
		c.written = append(c.written, vc.DeepCopy())
	}
}

type staleStatus struct{ c *staleClient }

func (s staleStatus) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.c.Client.Status().Create(ctx, obj, sub, opts...)
}

func (s staleStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	err := s.c.Client.Status().Update(ctx, obj, opts...)
	s.c.count(obj, err)
	return err
}

func (s staleStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	err := s.c.Client.Status().Patch(ctx, obj, patch, opts...)
	s.c.count(obj, err)
	return err
}

func (s staleStatus) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return s.c.Client.Status().Apply(ctx, obj, opts...)
}

// A reconcile that reads the VirtualCluster as it was before the last
// reconcile's own writes, from a cache behind them, writes nothing and
// tells no Event again: it waits for the cache.
func TestReadBehindOwnWritesWritesNothing(t *testing.T) {
	env, host := startHost(t, 1)
	kubeconfig, err := env.Tenants[0].Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	_, created := createVirtualCluster(t, host, "behind", kubeconfig)
	c := &staleClient{Client: host}
	r, _ := newReconciler(t, host, host)
	r.Client = c
	recorder := r.Recorder.(*events.FakeRecorder)
	reconcile := func() (ctrl.Result, error) {
		return r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(created)})
	}
	eventsTold := func() []string {
		var told []string
		for {
			select {
			case e := <-recorder.Events:
				told = append(told, e)
			default:
				return told
			}
		}
	}

	if _, err := reconcile(); err != nil {
		t.Fatal(err)
	}
	// The finalizer, then the status.
	if len(c.written) != 2 {
		t.Fatalf("the first reconcile wrote the VirtualCluster %d times; want 2", len(c.written))
	}
	finalized, ready := c.written[0], c.written[1]
	if cond := meta.FindStatusCondition(ready.Status.Conditions, tenantryv1alpha1.ConditionReady); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("after the first reconcile, Ready = %+v", cond)
	}
	if told := eventsTold(); len(told) != 1 {
		t.Fatalf("the first reconcile told %q; want one Event", told)
	}

	// Read before the writes, between them (the cache has the finalizer,
	// not the status: the reconcile that the finalizer's watch event
	// brings), and after them.
	for _, read := range []*tenantryv1alpha1.VirtualCluster{created, finalized, ready} {
		behind := read != ready
		c.stale.Store(read)
		before := c.writes.Load()
		res, err := reconcile()
		if err != nil {
			t.Fatal(err)
		}
		if n := c.writes.Load() - before; n != 0 {
			t.Errorf("read at resourceVersion %s: the VirtualCluster was written %d times again", read.ResourceVersion, n)
		}
		if told := eventsTold(); len(told) != 0 {
			t.Errorf("read at resourceVersion %s: told %q again", read.ResourceVersion, told)
		}
		if behind != (res.RequeueAfter > 0) {
			t.Errorf("read at resourceVersion %s: result %+v", read.ResourceVersion, res)
		}
	}
}
