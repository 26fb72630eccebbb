package syncer

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HostCopy keeps a field another writer added while the tenant asks for
// the same, writes a changed tenant object whole, repairs a tenant field
// changed in the host, and always restores the metadata Down sets.
func TestHostCopy(t *testing.T) {
	tr := translator{Cluster: "vc"}
	configMaps := Syncer{
		Name: "configmaps", Object: func() client.Object { return &corev1.ConfigMap{} }, CopyUserMetadata: true,
		Down: func(t, h client.Object) error {
			h.(*corev1.ConfigMap).Data = maps.Clone(t.(*corev1.ConfigMap).Data)
			return nil
		},
	}
	tenant := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"}, Data: map[string]string{"a": "1"}}
	written := func() *corev1.ConfigMap {
		h, err := configMaps.hostCopy(tr, tenant, nil)
		if err != nil {
			t.Fatal(err)
		}
		h.SetResourceVersion("1")
		return h.(*corev1.ConfigMap)
	}
	copyOf := func(current *corev1.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		h, err := configMaps.hostCopy(tr, tenant, current)
		if err != nil {
			t.Fatal(err)
		}
		return h.(*corev1.ConfigMap)
	}

	current := written()
	current.Data["injected"] = "by-the-host"
	if got := copyOf(current); got.Data["injected"] != "by-the-host" || got.Data["a"] != "1" {
		t.Errorf("another writer's key: data %v; want it kept", got.Data)
	}
	current = written()
	current.Data["a"] = "changed by hand"
	if got := copyOf(current); got.Data["a"] != "1" {
		t.Errorf("a tenant key changed in the host: data %v; want it repaired", got.Data)
	}
	current = written()
	current.Data["injected"] = "by-the-host"
	tenant.Data = map[string]string{"b": "2"}
	if got := copyOf(current); len(got.Data) != 1 || got.Data["b"] != "2" {
		t.Errorf("the tenant changed: data %v; want the tenant's whole", got.Data)
	}

	namespaces := namespaceSyncer("baseline")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u2"}}
	made, err := namespaces.hostCopy(tr, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	edited := made.(*corev1.Namespace)
	edited.ResourceVersion = "1"
	edited.Labels[labelPodSecurityEnforce] = "privileged"
	edited.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	got, err := namespaces.hostCopy(tr, ns, edited)
	if err != nil {
		t.Fatal(err)
	}
	if l := got.GetLabels()[labelPodSecurityEnforce]; l != "baseline" || len(got.(*corev1.Namespace).Spec.Finalizers) != 1 {
		t.Errorf("a host namespace set to %q by hand: enforce %q, finalizers %v; want baseline restored, the host's finalizer kept",
			"privileged", l, got.(*corev1.Namespace).Spec.Finalizers)
	}
}

func TestContains(t *testing.T) {
	for _, c := range []struct {
		name       string
		have, want any
		contains   bool
	}{
		{"equal", map[string]any{"a": "1"}, map[string]any{"a": "1"}, true},
		{"a key more", map[string]any{"a": "1", "b": "2"}, map[string]any{"a": "1"}, true},
		{"a key less", map[string]any{"a": "1"}, map[string]any{"a": "1", "b": "2"}, false},
		{"a value changed", map[string]any{"a": "2"}, map[string]any{"a": "1"}, false},
		{"nested key more", map[string]any{"s": map[string]any{"x": int64(1), "y": true}}, map[string]any{"s": map[string]any{"x": int64(1)}}, true},
		{"zero scalar absent", map[string]any{}, map[string]any{"n": int64(0)}, false},
		{"zero scalar changed", map[string]any{"f": true}, map[string]any{"f": false}, false},
		{"list element more fields", map[string]any{"l": []any{map[string]any{"a": "1", "b": "2"}}}, map[string]any{"l": []any{map[string]any{"a": "1"}}}, true},
		{"list element appended", map[string]any{"l": []any{"x", "y"}}, map[string]any{"l": []any{"x"}}, true},
		{"list element inserted", map[string]any{"l": []any{"s", "x", "t", "y"}}, map[string]any{"l": []any{"x", "y"}}, true},
		{"list element less", map[string]any{"l": []any{"x"}}, map[string]any{"l": []any{"x", "y"}}, false},
		{"list element changed", map[string]any{"l": []any{"x", "z"}}, map[string]any{"l": []any{"x", "y"}}, false},
		{"list reordered", map[string]any{"l": []any{"y", "x"}}, map[string]any{"l": []any{"x", "y"}}, false},
		{"list repeated element", map[string]any{"l": []any{"x", "y"}}, map[string]any{"l": []any{"x", "x"}}, false},
		{"list elements matched in order", map[string]any{"l": []any{map[string]any{"a": "1", "b": "2"}, map[string]any{"a": "1"}}},
			map[string]any{"l": []any{map[string]any{"a": "1"}, map[string]any{"a": "1", "b": "2"}}}, false},
		{"empty map held by absence", map[string]any{}, map[string]any{"m": map[string]any{}}, true},
		{"map wanted, scalar found", map[string]any{"m": "x"}, map[string]any{"m": map[string]any{"a": "1"}}, false},
	} {
		if got := contains(c.have, c.want); got != c.contains {
			t.Errorf("%s: contains(%v, %v) = %v, want %v", c.name, c.have, c.want, got, c.contains)
		}
		// With exact lists, no list element more.
		wantExact := c.contains && !strings.HasPrefix(c.name, "list element appended") && !strings.HasPrefix(c.name, "list element inserted")
		if got := containsExactLists(c.have, c.want); got != wantExact {
			t.Errorf("%s: containsExactLists(%v, %v) = %v, want %v", c.name, c.have, c.want, got, wantExact)
		}
	}
}
