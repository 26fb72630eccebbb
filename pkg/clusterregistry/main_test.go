package clusterregistry_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// shared is one host and two tenants for the tests that do not break them.
var shared *tenantrytest.Environment

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	env, err := tenantrytest.Start(context.Background(), tenantrytest.Options{Tenants: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = env
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// copyLabel marks the tenant ConfigMaps that copyModule copies.
const copyLabel = "tenantry.test/copy"

// copiesNamespace is the host namespace that holds the copies.
const copiesNamespace = "copies"

// copyModule registers, in every spawned cluster, a reconciler that copies
// the cluster's labelled ConfigMaps into the host through the manage-client,
// as <cluster>.<namespace>.<name>, and deletes the copy with the original.
var copyModule = fx.Invoke(func(p struct {
	fx.In
	Manager manager.Manager
	Host    client.Client `name:"manage-client"`
	Cluster string        `name:"cluster-name"`
}) error {
	return builder.ControllerManagedBy(p.Manager).
		Named(p.Cluster+"-configmap-copy").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[copyLabel] == "true"
		}))).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			tenant := p.Manager.GetClient()
			copied := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: copiesNamespace,
				Name:      copyName(p.Cluster, req.Namespace, req.Name),
			}}
			var original corev1.ConfigMap
			if err := tenant.Get(ctx, req.NamespacedName, &original); apierrors.IsNotFound(err) {
				return reconcile.Result{}, client.IgnoreNotFound(p.Host.Delete(ctx, copied))
			} else if err != nil {
				return reconcile.Result{}, err
			}
			if err := p.Host.Get(ctx, client.ObjectKeyFromObject(copied), copied); apierrors.IsNotFound(err) {
				copied.Data = original.Data
				return reconcile.Result{}, p.Host.Create(ctx, copied)
			} else if err != nil {
				return reconcile.Result{}, err
			}
			copied.Data = original.Data
			return reconcile.Result{}, p.Host.Update(ctx, copied)
		}))
})

func copyName(cluster, namespace, name string) string {
	return cluster + "." + namespace + "." + name
}

func newClient(t testing.TB, cp *tenantrytest.ControlPlane) client.Client {
	t.Helper()
	c, err := client.New(cp.Config(), client.Options{})
	if err != nil {
		t.Fatalf("client for %s: %v", cp.Name(), err)
	}
	return c
}

// ensureNamespace creates a namespace if it is not there yet.
func ensureNamespace(t testing.TB, c client.Client, name string) {
	t.Helper()
	err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// namespaceWithConfigMaps creates a namespace named after prefix, holding
// n ConfigMaps cm-0 ... cm-<n-1>, and returns its name.
func namespaceWithConfigMaps(t testing.TB, c client.Client, prefix string, n int) string {
	t.Helper()
	ns := unique(prefix)
	ensureNamespace(t, c, ns)
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", i)}}
		if err := c.Create(t.Context(), cm); err != nil {
			t.Fatalf("creating ConfigMap: %v", err)
		}
	}
	return ns
}

// createLabelled creates a ConfigMap that copyModule copies.
func createLabelled(t testing.TB, c client.Client, name, value string) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{copyLabel: "true"}},
		Data:       map[string]string{"value": value},
	}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatalf("creating ConfigMap %s: %v", name, err)
	}
}

// eventually is tenantrytest.Eventually.
var eventually = tenantrytest.Eventually

// expectCopy waits for the host copy of a tenant ConfigMap to hold value.
func expectCopy(t testing.TB, host client.Client, cluster, name, value string) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("copy of %s/default/%s = %q", cluster, name, value), func(ctx context.Context) (bool, error) {
		var cm corev1.ConfigMap
		err := host.Get(ctx, client.ObjectKey{Namespace: copiesNamespace, Name: copyName(cluster, "default", name)}, &cm)
		return err == nil && cm.Data["value"] == value, err
	})
}

// hasCopy says whether the host holds a copy of a tenant ConfigMap now.
func hasCopy(t testing.TB, host client.Client, cluster, name string) bool {
	t.Helper()
	var cm corev1.ConfigMap
	err := host.Get(t.Context(), client.ObjectKey{Namespace: copiesNamespace, Name: copyName(cluster, "default", name)}, &cm)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("reading copy: %v", err)
	}
	return err == nil
}
