package syncer_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
)

var widgetGVK = schema.GroupVersionKind{Group: "samples.tenantry.dev", Version: "v1", Kind: "Widget"}

func widget(spec, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	if status != nil {
		u.Object["status"] = status
	}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace("default")
	u.SetName("w")
	u.SetUID("u1")
	return u
}

func TestCustomResourceSyncer(t *testing.T) {
	s := syncer.CustomResource(widgetGVK)
	if s.Name != "widget.samples.tenantry.dev" {
		t.Fatalf("name %q", s.Name)
	}
	tenant := widget(map[string]any{"size": int64(3)}, map[string]any{"seen": "by tenant"})
	tenant.Object["data"] = map[string]any{"k": "v"} // top-level content beside spec goes down too

	h, err := s.HostCopy("vc", tenant, nil)
	if err != nil {
		t.Fatal(err)
	}
	host := h.(*unstructured.Unstructured)
	if size, _, _ := unstructured.NestedInt64(host.Object, "spec", "size"); size != 3 {
		t.Errorf("host spec.size = %d", size)
	}
	if _, found := host.Object["status"]; found {
		t.Error("status went down")
	}
	if v, _, _ := unstructured.NestedString(host.Object, "data", "k"); v != "v" {
		t.Errorf("host data.k = %q", v)
	}
	if host.GetNamespace() != syncer.HostNamespace("vc", "default") || host.GetLabels()[syncer.LabelCluster] != "vc" {
		t.Errorf("host copy identity: %s/%s %v", host.GetNamespace(), host.GetName(), host.GetLabels())
	}

	// Content the tenant no longer has leaves the host copy too.
	delete(tenant.Object, "data")
	h, err = s.HostCopy("vc", tenant, host)
	if err != nil {
		t.Fatal(err)
	}
	if _, found := h.(*unstructured.Unstructured).Object["data"]; found {
		t.Error("removed content stayed in the host copy")
	}

	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(widgetGVK, &unstructured.Unstructured{})
	host.Object["status"] = map[string]any{"ready": true}
	up, changed, err := syncertest.Up(t.Context(), s, scheme, host, tenant)
	if err != nil || !changed {
		t.Fatalf("Up: changed %v, err %v", changed, err)
	}
	if ready, _, _ := unstructured.NestedBool(up.(*unstructured.Unstructured).Object, "status", "ready"); !ready {
		t.Fatalf("tenant status = %v", up.(*unstructured.Unstructured).Object["status"])
	}
}
