package clusterregistry

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
)

// An object is counted as encoded, without its managed fields, whichever
// way the cache holds it; an unstructured one within a tenth of its JSON.
func TestEncodedSize(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "big", Labels: map[string]string{"app": "web"}},
		Data:       map[string]string{"data": strings.Repeat("x", 100<<10)},
	}
	bare := encodedSize(cm)
	if bare < 100<<10 || bare > 100<<10+200 {
		t.Fatalf("a ConfigMap of 100 KiB counts %d bytes", bare)
	}
	managed := cm.DeepCopy()
	managed.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:data":{}}}`)}}}
	// Within the few bytes by which ObjectMeta's own length prefix shrinks.
	if got := encodedSize(managed); got < bare-4 || got > bare+4 {
		t.Errorf("with managed fields it counts %d, want %d: a cache drops them", got, bare)
	}
	if got := encodedSize(toolscache.DeletedFinalStateUnknown{Key: "ns/big", Obj: cm}); got != bare {
		t.Errorf("a tombstone counts %d, want its object's %d", got, bare)
	}

	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(managed)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: raw}
	u.SetManagedFields(nil)
	js, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	u.SetManagedFields(managed.ManagedFields)
	got := encodedSize(u)
	if diff := got - int64(len(js)); diff < -int64(len(js))/10 || diff > int64(len(js))/10 {
		t.Errorf("an unstructured object counts %d, its JSON without managed fields is %d bytes", got, len(js))
	}
}

// The limits left 0 are the registry's; negative ones are none.
func TestCacheLimitsOver(t *testing.T) {
	def := CacheLimits{Objects: 10, Bytes: 20}
	if got := (CacheLimits{}).over(def); got != def {
		t.Errorf("unset limits: %+v, want the defaults %+v", got, def)
	}
	if got := (CacheLimits{Objects: -1, Bytes: 5}).over(def); got != (CacheLimits{Objects: -1, Bytes: 5}) {
		t.Errorf("set limits: %+v, want them kept", got)
	}
	m := newCacheMeter("limits", CacheLimits{Objects: -1, Bytes: 1 << 20})
	defer m.forget()
	u := m.track("v1.ConfigMap")
	m.add(u, 1000, 1000)
	if m.Err() != nil {
		t.Fatalf("no object limit, under the byte limit: %v", m.Err())
	}
	m.add(u, 0, 1<<20)
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), "v1.ConfigMap") {
		t.Fatalf("past the byte limit: %v, want ErrCacheLimit naming the type", err)
	}
	select {
	case <-m.Exceeded():
	default:
		t.Fatal("Exceeded not closed")
	}
}
