package foo_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tenantry/tenantry/examples/foo"
	foov1alpha1 "github.com/tenantry/tenantry/examples/foo/api/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

func newScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, foov1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// The Foo syncer, unit-tested without API servers.
func TestSyncerWithoutAPIServers(t *testing.T) {
	tenant := &foov1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "f", UID: "u1", Labels: map[string]string{"app": "f"}},
		Spec:       foov1alpha1.FooSpec{Replicas: ptr.To[int32](3)},
	}
	s := foo.Syncer()
	h, err := s.HostCopy("vc", tenant, nil)
	if err != nil {
		t.Fatal(err)
	}
	host := h.(*foov1alpha1.Foo)
	if *host.Spec.Replicas != 3 || host.Namespace != syncer.HostNamespace("vc", "team") || host.Labels["app"] != "f" ||
		host.Annotations[syncer.AnnotationTenantUID] != "u1" {
		t.Fatalf("host copy = %+v", host)
	}

	host.Status.ObservedReplicas = 3
	up, changed, err := syncertest.Up(t.Context(), s, newScheme(t), host, tenant)
	if err != nil || !changed {
		t.Fatalf("Up: changed %v, err %v", changed, err)
	}
	if got := up.(*foov1alpha1.Foo).Status.ObservedReplicas; got != 3 {
		t.Fatalf("tenant status = %d, want 3", got)
	}
}

// Public CRDs reach every tenant, before and after they spawn; a Foo syncer
// that waited for its CRD starts when it arrives; status comes up; deletion
// goes down.
func TestPublicCRDsAndFoos(t *testing.T) {
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Tenants:               2,
		Scheme:                newScheme(t),
		Syncers:               []syncer.Syncer{foo.Syncer()},
		HostCRDDirectoryPaths: []string{"testdata"},
	})
	ctx := t.Context()

	// Created in the host after the tenants spawned: Foo (public) and a
	// private CRD, at once.
	fooCRD := readCRD(t, filepath.Join("..", "config", "crd", "samples.tenantry.dev_foos.yaml"))
	fooCRD.Labels = map[string]string{syncer.LabelPublicCRD: "true"}
	private := readCRD(t, "testdata/gadgets-public-crd.yaml")
	private.Name, private.Labels = "widgets.private.example", nil
	private.Spec.Group = "private.example"
	private.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget", ListKind: "WidgetList", Plural: "widgets", Singular: "widget"}
	for _, crd := range []*apiextensionsv1.CustomResourceDefinition{fooCRD, private} {
		if err := w.Host.Create(ctx, crd); err != nil {
			t.Fatal(err)
		}
	}

	for name, tenant := range w.Tenants {
		for _, crd := range []string{"gadgets.samples.tenantry.dev", "foos.samples.tenantry.dev"} {
			tenantrytest.Eventually(t, 20*time.Second, fmt.Sprintf("CRD %s in %s", crd, name), func(ctx context.Context) (bool, error) {
				err := tenant.Get(ctx, client.ObjectKey{Name: crd}, &apiextensionsv1.CustomResourceDefinition{})
				return err == nil, err
			})
		}
		err := tenant.Get(ctx, client.ObjectKey{Name: private.Name}, &apiextensionsv1.CustomResourceDefinition{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("private CRD in %s: %v, want NotFound", name, err)
		}
	}

	t.Run("a CRD that stops being public is no longer synced, and its copy stays", func(t *testing.T) {
		addShortName := func(name, short string, unlabel bool) {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := w.Host.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
				t.Fatal(err)
			}
			if unlabel {
				delete(crd.Labels, syncer.LabelPublicCRD)
			}
			crd.Spec.Names.ShortNames = append(crd.Spec.Names.ShortNames, short)
			if err := w.Host.Update(ctx, &crd); err != nil {
				t.Fatal(err)
			}
		}
		addShortName("gadgets.samples.tenantry.dev", "gd", true)
		addShortName("foos.samples.tenantry.dev", "fo", false)
		tenant := w.Tenants["tenant-1"]
		// Once the public CRD's change has arrived, the other's would have too.
		tenantrytest.Eventually(t, 20*time.Second, "public CRD change in tenant-1", func(ctx context.Context) (bool, error) {
			var crd apiextensionsv1.CustomResourceDefinition
			err := tenant.Get(ctx, client.ObjectKey{Name: "foos.samples.tenantry.dev"}, &crd)
			return err == nil && len(crd.Spec.Names.ShortNames) == 1, err
		})
		var gadgets apiextensionsv1.CustomResourceDefinition
		if err := tenant.Get(ctx, client.ObjectKey{Name: "gadgets.samples.tenantry.dev"}, &gadgets); err != nil {
			t.Fatalf("the tenant copy of a no-longer-public CRD is gone: %v", err)
		}
		if len(gadgets.Spec.Names.ShortNames) != 0 {
			t.Fatalf("a no-longer-public CRD is still synced: short names %v", gadgets.Spec.Names.ShortNames)
		}
	})

	tenant := w.Tenants["tenant-1"]
	f := &foov1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "frobnicator"},
		Spec:       foov1alpha1.FooSpec{Replicas: ptr.To[int32](2)},
	}
	tenantrytest.Eventually(t, 20*time.Second, "Foo accepted by tenant-1", func(ctx context.Context) (bool, error) {
		err := tenant.Create(ctx, f)
		return err == nil || apierrors.IsAlreadyExists(err), err
	})
	var host foov1alpha1.Foo
	hostKey := w.HostKey("tenant-1", "default", "frobnicator")
	tenantrytest.Eventually(t, 20*time.Second, "host copy of the Foo", func(ctx context.Context) (bool, error) {
		err := w.Host.Get(ctx, hostKey, &host)
		return err == nil && host.Spec.Replicas != nil && *host.Spec.Replicas == 2, err
	})

	host.Status.ObservedReplicas = 2
	if err := w.Host.Status().Update(ctx, &host); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 10*time.Second, "status up in tenant-1", func(ctx context.Context) (bool, error) {
		var got foov1alpha1.Foo
		err := tenant.Get(ctx, client.ObjectKeyFromObject(f), &got)
		return err == nil && got.Status.ObservedReplicas == 2, err
	})

	if err := tenant.Delete(ctx, f); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 10*time.Second, "host copy removed", func(ctx context.Context) (bool, error) {
		err := w.Host.Get(ctx, hostKey, &foov1alpha1.Foo{})
		return apierrors.IsNotFound(err), err
	})
}

func readCRD(t *testing.T, path string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}
