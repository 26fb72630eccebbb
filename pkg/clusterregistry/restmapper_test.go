package clusterregistry_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/fx"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// Clusters whose API servers run the same version share the mapping of
// the built-in groups, discovered once; each still maps its own custom
// resources, including those that arrive after it started.
func TestBuiltinMappingIsSharedPerVersion(t *testing.T) {
	mappers := make(chan meta.RESTMapper, 2)
	r := newRegistry(t, clusterregistry.Options{}, fx.Invoke(func(m manager.Manager) { mappers <- m.GetRESTMapper() }))
	for i, name := range []string{"mapping-a", "mapping-b"} {
		if err := r.Spawn(name, shared.Tenants[i].Config()); err != nil {
			t.Fatal(err)
		}
	}
	a, b := <-mappers, <-mappers
	sharedA, sharedB := clusterregistry.SharedMapping(a), clusterregistry.SharedMapping(b)
	if sharedA == nil || sharedA != sharedB {
		t.Fatalf("the two clusters of one version do not share one mapping of the built-in groups (%p, %p)", sharedA, sharedB)
	}
	for _, m := range []meta.RESTMapper{a, b} {
		for _, gk := range []schema.GroupKind{{Kind: "ConfigMap"}, {Group: "apps", Kind: "Deployment"}, {Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}} {
			if _, err := m.RESTMapping(gk); err != nil {
				t.Errorf("mapping %s: %v", gk, err)
			}
		}
	}

	// Asked again, the shared mapping answers the same, each caller a
	// copy of its own, and by the versions asked for.
	mine, err := a.RESTMapping(schema.GroupKind{Kind: "ConfigMap"})
	if err != nil {
		t.Fatal(err)
	}
	mine.Resource.Resource = "changed by a caller"
	if theirs, err := b.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}); err != nil || theirs.Resource.Resource != "configmaps" {
		t.Errorf("a second caller's mapping of ConfigMap: %v, %v", theirs, err)
	}
	hpa := schema.GroupKind{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"}
	for _, version := range []string{"v1", "v2", "v1"} {
		if m, err := a.RESTMapping(hpa, version); err != nil || m.GroupVersionKind.Version != version {
			t.Errorf("mapping %s at %s: %v, %v", hpa, version, m, err)
		}
	}

	// A custom resource of the second tenant only, made after both started.
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.mapping.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "mapping.example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}},
			}},
		},
	}
	tenant := newClient(t, shared.Tenants[1])
	if err := tenant.Create(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(t.Context(), crd) })
	widget := schema.GroupKind{Group: "mapping.example.com", Kind: "Widget"}
	eventually(t, 20*time.Second, "the second cluster maps its new custom resource", func(context.Context) (bool, error) {
		_, err := b.RESTMapping(widget, "v1")
		return err == nil, err
	})
	if _, err := a.RESTMapping(widget, "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("the first cluster maps the second's custom resource: %v", err)
	}
	// The built-in mapping does not serve what the version lacks.
	if _, err := a.RESTMapping(schema.GroupKind{Group: "apps", Kind: "NoSuchKind"}); !meta.IsNoMatchError(err) {
		t.Errorf("an unknown built-in kind: %v, want no match", err)
	}
}
