package hostcache

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// DigestFrom is the size of a ConfigMap's or Secret's data from which the
// cache holds it as a digest: nothing the hub does with a copy needs its
// data but to tell whether it is what the tenant asked for, and a digest
// tells that. Below it, a copy is held whole (and its values shared with
// its tenant object's, see internal/dedup).
const DigestFrom = 16 << 10

// AnnotationHeldAsDigest is set by the cache, and only in the cache, on a
// ConfigMap or Secret whose data it holds as a digest: the data's size in
// bytes and its digest. Any the host object carries is removed first, so
// that the cache alone says it.
const AnnotationHeldAsDigest = "tenantry.dev/held-as-digest"

var digestedBytes = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "tenantry_hub_copies_digested_bytes_total",
	Help: fmt.Sprintf("Bytes of host copies' ConfigMap and Secret data (of %d KiB or more an object) that the hub's cache of the host holds as a digest instead.", DigestFrom>>10),
})

func init() { metrics.Registry.MustRegister(digestedBytes) }

// digestLargeData is a cache transform: a ConfigMap or a Secret whose data
// is DigestFrom bytes or more loses it for AnnotationHeldAsDigest. It
// changes obj, the informer's own.
func digestLargeData(obj any) (any, error) {
	if o, ok := obj.(client.Object); ok {
		if size, digested := holdAsDigest(o); digested {
			digestedBytes.Add(float64(size))
		}
	}
	return obj, nil
}

// holdAsDigest makes obj what the cache holds of it: without any
// AnnotationHeldAsDigest of its own, then digestData.
func holdAsDigest(obj client.Object) (int, bool) {
	if a := obj.GetAnnotations(); a != nil {
		delete(a, AnnotationHeldAsDigest)
	}
	return digestData(obj)
}

// digestData replaces the data of obj, a ConfigMap or a Secret, by
// AnnotationHeldAsDigest when it is DigestFrom bytes or more, and says
// how large it was and whether it did.
func digestData(obj client.Object) (int, bool) {
	var text map[string]string
	var binary map[string][]byte
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		text, binary = o.Data, o.BinaryData
	case *corev1.Secret:
		binary = o.Data
	default:
		return 0, false
	}
	size := 0
	for k, v := range text {
		size += len(k) + len(v)
	}
	for k, v := range binary {
		size += len(k) + len(v)
	}
	if size < DigestFrom {
		return size, false
	}
	h := sha256.New()
	// Keys in order, each with its length, so that no two data hash alike
	// by where one value ends and the next begins.
	for _, k := range slices.Sorted(maps.Keys(text)) {
		fmt.Fprintf(h, "t%d:%s%d:", len(k), k, len(text[k]))
		h.Write([]byte(text[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(binary)) {
		fmt.Fprintf(h, "b%d:%s%d:", len(k), k, len(binary[k]))
		h.Write(binary[k])
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		o.Data, o.BinaryData = nil, nil
	case *corev1.Secret:
		o.Data = nil
	}
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[AnnotationHeldAsDigest] = strconv.Itoa(size) + " " + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
	obj.SetAnnotations(a)
	return size, true
}

// HeldAsDigest says whether the cache holds obj's data as a digest, and
// the data's size in bytes if so.
func HeldAsDigest(obj client.Object) (size int64, ok bool) {
	v, ok := obj.GetAnnotations()[AnnotationHeldAsDigest]
	if !ok {
		return 0, false
	}
	n, _, _ := strings.Cut(v, " ")
	size, err := strconv.ParseInt(n, 10, 64)
	return size, err == nil
}

// AsHeld is obj as the cache would hold it: a copy, its data a digest
// when the cache's would be, to compare with an object the cache holds.
func AsHeld(obj client.Object) client.Object {
	held := obj.DeepCopyObject().(client.Object)
	holdAsDigest(held)
	return held
}

// wholeReader reads the cache, and the host for each object the cache
// holds as a digest: it reads objects whole.
type wholeReader struct {
	held client.Reader // the cache
	host client.Reader // the host API server
}

func (r wholeReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.held.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if _, digested := HeldAsDigest(obj); !digested {
		return nil
	}
	if err := r.host.Get(ctx, key, obj); err != nil {
		return fmt.Errorf("reading the data of %s, held as a digest, from the host: %w", key, err)
	}
	return nil
}

func (r wholeReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := r.held.List(ctx, list, opts...); err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	whole := make([]runtime.Object, 0, len(items))
	changed := false
	for _, item := range items {
		obj, ok := item.(client.Object)
		if !ok {
			whole = append(whole, item)
			continue
		}
		if _, digested := HeldAsDigest(obj); !digested {
			whole = append(whole, item)
			continue
		}
		changed = true
		// A new object: the item may be the cache's own (UnsafeDisableDeepCopy).
		read := obj.DeepCopyObject().(client.Object)
		if err := r.host.Get(ctx, client.ObjectKeyFromObject(obj), read); err != nil {
			if apierrors.IsNotFound(err) {
				continue // gone since the cache listed it
			}
			return fmt.Errorf("reading the data of %s, held as a digest, from the host: %w", client.ObjectKeyFromObject(obj), err)
		}
		whole = append(whole, read)
	}
	if !changed {
		return nil
	}
	return meta.SetList(list, whole)
}
