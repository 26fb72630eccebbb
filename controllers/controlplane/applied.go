package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// reapplyAfter is how long an object of a kind the controller does not
// watch is taken as it was last applied: past it, it is applied again,
// which undoes a change made by hand.
const reapplyAfter = time.Minute

// appliedObjects remembers what the controller last applied of each
// object, so that a reconcile that wants the same sends nothing. A
// control plane that comes up is reconciled every few seconds, and on
// every change of its Pods; each reconcile applied its namespace, policy,
// budget, Services and StatefulSets anew, server side, though nothing
// had changed: with 20 made at once, 1,125 applies of each kind in four
// minutes, the host API server's largest load, while it spent more CPU
// than any of the control planes it was starting.
//
// An object of a watched kind (StatefulSet, Service: the workloads'
// cache) is skipped only while the cache holds it as the apply answered
// it, so any change to it, by anyone, is applied over at once: a Service
// while the cache holds the version answered; a StatefulSet, whose
// status changes with each of its Pods, while its generation (its spec)
// and its labels, annotations and owners are those answered. An object
// of another kind is skipped for reapplyAfter.
type appliedObjects struct {
	mu   sync.Mutex
	last map[appliedKey]appliedRecord
}

type appliedKey struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

type appliedRecord struct {
	digest          [sha256.Size]byte
	resourceVersion string
	generation      int64
	metadata        [sha256.Size]byte // metadataDigest of the answer
	at              time.Time
}

// metadataDigest is the digest of the metadata of o that an apply sets
// and that a change other than to its spec or status changes: labels,
// annotations and owners.
func metadataDigest(o client.Object) [sha256.Size]byte {
	data, err := json.Marshal([]any{o.GetLabels(), o.GetAnnotations(), o.GetOwnerReferences()})
	if err != nil { // maps of strings and a list of structs always encode
		return [sha256.Size]byte{}
	}
	return sha256.Sum256(data)
}

// digestOf is the digest of o as it is to be applied.
func digestOf(o client.Object) ([sha256.Size]byte, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("encoding %s: %w", client.ObjectKeyFromObject(o), err)
	}
	return sha256.Sum256(data), nil
}

// watched says whether objects of o's kind are in the workloads' cache.
func watched(o client.Object) bool {
	switch o.(type) {
	case *appsv1.StatefulSet, *corev1.Service:
		return true
	}
	return false
}

// unchanged says whether o, of kind gvk and digest, is as the controller
// last applied it; for a watched kind, o is then filled from the cache,
// as an apply would have filled it.
func (a *appliedObjects) unchanged(ctx context.Context, cache client.Reader, gvk schema.GroupVersionKind, o client.Object, digest [sha256.Size]byte, now time.Time) bool {
	key := appliedKey{gvk: gvk, namespace: o.GetNamespace(), name: o.GetName()}
	a.mu.Lock()
	rec, ok := a.last[key]
	a.mu.Unlock()
	if !ok || rec.digest != digest {
		return false
	}
	if !watched(o) {
		return now.Sub(rec.at) < reapplyAfter
	}
	current := o.DeepCopyObject().(client.Object)
	if err := cache.Get(ctx, client.ObjectKeyFromObject(o), current); err != nil {
		return false
	}
	if _, ok := o.(*appsv1.StatefulSet); ok {
		if current.GetGeneration() != rec.generation || metadataDigest(current) != rec.metadata {
			return false
		}
	} else if current.GetResourceVersion() != rec.resourceVersion {
		return false
	}
	current.GetObjectKind().SetGroupVersionKind(gvk)
	// The same type: the cache's copy is what the apply answered, or newer
	// in its status alone.
	switch want := o.(type) {
	case *appsv1.StatefulSet:
		*want = *current.(*appsv1.StatefulSet)
	case *corev1.Service:
		*want = *current.(*corev1.Service)
	}
	return true
}

// record notes that o, of digest, was applied and answered as o is now.
func (a *appliedObjects) record(gvk schema.GroupVersionKind, o client.Object, digest [sha256.Size]byte, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = map[appliedKey]appliedRecord{}
	}
	a.last[appliedKey{gvk: gvk, namespace: o.GetNamespace(), name: o.GetName()}] = appliedRecord{
		digest: digest, resourceVersion: o.GetResourceVersion(), generation: o.GetGeneration(), metadata: metadataDigest(o), at: now,
	}
}

// forget drops what was applied in namespace, and the namespace itself:
// a control plane removed, or an apply there that failed (its namespace
// deleted by hand, say), after which everything is applied anew.
func (a *appliedObjects) forget(namespace string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.last {
		if k.namespace == namespace || k.namespace == "" && k.name == namespace && k.gvk.Kind == "Namespace" {
			delete(a.last, k)
		}
	}
}
