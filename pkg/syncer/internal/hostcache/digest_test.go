package hostcache

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func largeConfigMap(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}, Data: data}
}

func held(t *testing.T, obj any) any {
	t.Helper()
	got, err := digestLargeData(obj)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestLargeDataIsHeldAsADigest(t *testing.T) {
	big := strings.Repeat("x", DigestFrom)
	cm := held(t, largeConfigMap(map[string]string{"a": big})).(*corev1.ConfigMap)
	if cm.Data != nil {
		t.Error("a ConfigMap of 16 KiB is held with its data")
	}
	size, ok := HeldAsDigest(cm)
	if !ok || size != int64(DigestFrom+1) {
		t.Errorf("HeldAsDigest = %d, %v; want %d, true", size, ok, DigestFrom+1)
	}

	secret := held(t, &corev1.Secret{Data: map[string][]byte{"key": []byte(big)}}).(*corev1.Secret)
	if _, ok := HeldAsDigest(secret); !ok || secret.Data != nil {
		t.Error("a Secret of 16 KiB is held with its data")
	}

	small := held(t, largeConfigMap(map[string]string{"a": "b"})).(*corev1.ConfigMap)
	if _, ok := HeldAsDigest(small); ok || small.Data["a"] != "b" {
		t.Error("a small ConfigMap is not held whole")
	}
}

// What a host object says of itself is never taken for the cache's
// digest: a copy whose annotation claims a digest is held whole, as it is.
func TestADigestAnnotationFromTheHostIsDropped(t *testing.T) {
	forged := largeConfigMap(map[string]string{"a": "b"})
	forged.Annotations = map[string]string{AnnotationHeldAsDigest: "99 abc"}
	got := held(t, forged).(*corev1.ConfigMap)
	if _, ok := HeldAsDigest(got); ok || got.Data["a"] != "b" {
		t.Errorf("a host object's own %s was kept: %v", AnnotationHeldAsDigest, got.Annotations)
	}
}

// AsHeld compares as equal what holds the same data, and only that: a
// value moved across a key's end, or a value changed, tells.
func TestAsHeldTellsDataApart(t *testing.T) {
	big := strings.Repeat("x", DigestFrom)
	cached := held(t, largeConfigMap(map[string]string{"ab": big, "c": "d"})).(*corev1.ConfigMap)
	same := largeConfigMap(map[string]string{"ab": big, "c": "d"})
	if !equality.Semantic.DeepEqual(AsHeld(same), cached) {
		t.Error("the same data does not compare equal as held")
	}
	if same.Data == nil {
		t.Error("AsHeld changed the object it was given")
	}
	for name, other := range map[string]map[string]string{
		"a key's end moved": {"a": "b" + big, "c": "d"},
		"a value changed":   {"ab": big, "c": "e"},
		"a key added":       {"ab": big, "c": "d", "e": ""},
	} {
		if equality.Semantic.DeepEqual(AsHeld(largeConfigMap(other)), cached) {
			t.Errorf("%s: compares equal as held", name)
		}
	}
}

// The whole reader reads what the cache holds as a digest from the host,
// and what it holds whole from the cache; a copy gone from the host since
// is left out of a list.
func TestTheWholeReaderReadsDigestsFromTheHost(t *testing.T) {
	big := strings.Repeat("x", DigestFrom)
	whole := func(name, value string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"a": value}}
	}
	asHeld := func(cm *corev1.ConfigMap) client.Object { return AsHeld(cm) }
	held := fake.NewClientBuilder().WithObjects(asHeld(whole("large", big)), asHeld(whole("small", "v")), asHeld(whole("gone", big))).Build()
	host := fake.NewClientBuilder().WithObjects(whole("large", big)).Build()
	r := wholeReader{held: held, host: host}

	var got corev1.ConfigMap
	if err := r.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "large"}, &got); err != nil || got.Data["a"] != big {
		t.Errorf("Get of a digested copy: %v, data of %d bytes, want it whole", err, len(got.Data["a"]))
	}
	var list corev1.ConfigMapList
	if err := r.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int{}
	for _, cm := range list.Items {
		sizes[cm.Name] = len(cm.Data["a"])
	}
	if len(sizes) != 2 || sizes["large"] != len(big) || sizes["small"] != 1 {
		t.Errorf("List: data sizes by name %v, want large whole, small, and no gone", sizes)
	}
}
