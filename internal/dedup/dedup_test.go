package dedup

import (
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
)

func configMap(values map[string]string) *corev1.ConfigMap {
	data := map[string]string{}
	for k, v := range values {
		data[k] = strings.Clone(v) // each object's own bytes, as decoded
	}
	return &corev1.ConfigMap{Data: data}
}

func transform(t *testing.T, obj any) {
	t.Helper()
	if _, err := Transform(obj); err != nil {
		t.Fatal(err)
	}
}

func sameBytes(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestEqualLargeValuesShareTheirBytes(t *testing.T) {
	large, other := strings.Repeat("a", 4<<10), strings.Repeat("b", 4<<10)
	small := strings.Repeat("s", MinSize-1)
	before := testutil.ToFloat64(sharedTotal)

	tenant := configMap(map[string]string{"large": large, "other": other, "small": small})
	host := configMap(map[string]string{"large": large, "other": large, "small": small})
	transform(t, tenant)
	transform(t, host)

	if !sameBytes(tenant.Data["large"], host.Data["large"]) {
		t.Error("equal values of 4 KiB are held twice")
	}
	if host.Data["other"] != large || !sameBytes(host.Data["other"], tenant.Data["large"]) {
		t.Error("a value is shared by its content, whichever key holds it")
	}
	if tenant.Data["other"] != other {
		t.Errorf("another value changed: %.10q...", tenant.Data["other"])
	}
	if sameBytes(tenant.Data["small"], host.Data["small"]) {
		t.Errorf("values under %d bytes are shared", MinSize)
	}
	if got := testutil.ToFloat64(sharedTotal) - before; got != 2*4<<10 {
		t.Errorf("tenantry_cache_shared_bytes_total rose by %v, want %v", got, 2*4<<10)
	}
	runtime.KeepAlive(tenant)
	runtime.KeepAlive(host)
}

func TestSecretBytesAreSharedReadOnly(t *testing.T) {
	value := []byte(strings.Repeat("k", 2<<10))
	a := &corev1.Secret{Data: map[string][]byte{"key": append([]byte(nil), value...)}}
	b := &corev1.Secret{Data: map[string][]byte{"key": append([]byte(nil), value...)}}
	transform(t, a)
	transform(t, b)
	if unsafe.SliceData(a.Data["key"]) != unsafe.SliceData(b.Data["key"]) {
		t.Fatal("equal Secret values are held twice")
	}
	if got := cap(b.Data["key"]); got != len(value) {
		t.Errorf("a shared slice's capacity is %d, want its length %d (an append must copy)", got, len(value))
	}
	appended := append(b.Data["key"], '!')
	if unsafe.SliceData(appended) == unsafe.SliceData(a.Data["key"]) {
		t.Error("an append wrote into the shared array")
	}
	runtime.KeepAlive(a)
}

func TestOtherObjectsAreLeftAlone(t *testing.T) {
	pod := &corev1.Pod{}
	got, err := Transform(pod)
	if err != nil || got != any(pod) {
		t.Fatalf("Transform(Pod) = %v, %v; want the Pod itself", got, err)
	}
	tomb := "not an object"
	if got, err := Transform(tomb); err != nil || got != any(tomb) {
		t.Fatalf("Transform(%q) = %v, %v", tomb, got, err)
	}
}

// The table holds nothing alive: once no object holds a value, its entry
// goes.
func TestEntriesGoWithTheirValues(t *testing.T) {
	held := func() int { return stringValues.len() + byteValues.len() }
	base := held()
	func() {
		for i := range 10 {
			cm := configMap(map[string]string{"v": strings.Repeat(string(rune('a'+i)), 8<<10)})
			transform(t, cm)
		}
	}()
	if got := held(); got != base+10 {
		t.Fatalf("the table holds %d values, want %d", got, base+10)
	}
	deadline := time.Now().Add(10 * time.Second)
	for held() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries outlive their values", held()-base)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // cleanups run on their own goroutine
	}
}
