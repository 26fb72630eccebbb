package clusterregistry_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// recorder counts, by event and object name, what one handler was told.
type recorder struct {
	mu     sync.Mutex
	events map[string]int // "add/initial:cm-1", "update:cm-1", "delete:cm-1"
}

func newRecorder() *recorder { return &recorder{events: map[string]int{}} }

func (r *recorder) handler() toolscache.ResourceEventHandler {
	name := func(o any) string { return o.(*corev1.ConfigMap).Name }
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(o any, initial bool) {
			if initial {
				r.note("add/initial:" + name(o))
			} else {
				r.note("add:" + name(o))
			}
		},
		UpdateFunc: func(_, o any) { r.note("update:" + name(o)) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			r.note("delete:" + name(o))
		},
	}
}

func (r *recorder) note(e string) {
	r.mu.Lock()
	r.events[e]++
	r.mu.Unlock()
}

func (r *recorder) count(e string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[e]
}

// waitFor polls until r has been told e, for at most 30 s.
func (r *recorder) waitFor(t *testing.T, e string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for r.count(e) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the handler was never told %s; it was told %v", e, r.events)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A cluster cache's informer hands each event to its handlers itself: every
// handler sees the initial list and each change once; one added late is
// told of the whole store before AddEventHandler returns and is synced at
// once; one removed is told nothing more; the transform applies; and a
// stopped informer takes no handler.
func TestDirectInformerKeepsTheInformerPromises(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	tenant := newClient(t, shared.Tenants[0])
	const existing = 5
	ns := namespaceWithConfigMaps(t, tenant, "direct", existing)
	clientset := kubernetes.NewForConfigOrDie(shared.Tenants[0].Config())
	lw := toolscache.NewListWatchFromClient(clientset.CoreV1().RESTClient(), "configmaps", ns, fields.Everything())
	informer := clusterregistry.NewDirectInformer(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	if err := informer.SetTransform(func(o any) (any, error) {
		cm := o.(*corev1.ConfigMap)
		cm.Annotations = map[string]string{"transformed": "yes"}
		return cm, nil
	}); err != nil {
		t.Fatalf("SetTransform before Run: %v", err)
	}

	early := newRecorder()
	earlyReg, err := informer.AddEventHandler(early.handler())
	if err != nil {
		t.Fatalf("AddEventHandler before Run: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		informer.RunWithContext(runCtx)
	}()
	defer func() { stop(); <-done }()
	if !toolscache.WaitFor(ctx, "", earlyReg.HasSyncedChecker()) {
		t.Fatal("the handler added before Run never synced")
	}
	// Synced means told: no poll here.
	for i := range existing {
		if n := early.count(fmt.Sprintf("add/initial:cm-%d", i)); n != 1 {
			t.Fatalf("the early handler was told of cm-%d %d times in the initial list, want once; told %v", i, n, early.events)
		}
	}
	if err := informer.SetTransform(nil); err == nil {
		t.Error("SetTransform after Run: no error")
	}
	obj, ok, err := informer.GetStore().GetByKey(ns + "/cm-0")
	if err != nil || !ok {
		t.Fatalf("the store has no cm-0: %v", err)
	}
	if got := obj.(*corev1.ConfigMap).Annotations["transformed"]; got != "yes" {
		t.Errorf("the stored cm-0 was not transformed: annotations %v", obj.(*corev1.ConfigMap).Annotations)
	}

	created := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-new"}}
	if err := tenant.Create(ctx, created); err != nil {
		t.Fatalf("creating ConfigMap: %v", err)
	}
	early.waitFor(t, "add:cm-new")

	// Added late: the whole store, before AddEventHandler returns.
	late := newRecorder()
	lateReg, err := informer.AddEventHandler(late.handler())
	if err != nil {
		t.Fatalf("AddEventHandler after sync: %v", err)
	}
	if !lateReg.HasSynced() {
		t.Error("a handler added after the informer synced is not synced")
	}
	for _, name := range []string{"cm-0", "cm-4", "cm-new"} {
		if n := late.count("add/initial:" + name); n != 1 {
			t.Errorf("the late handler was told of %s %d times on its replay, want once; told %v", name, n, late.events)
		}
	}

	created.Data = map[string]string{"k": "v"}
	if err := tenant.Update(ctx, created); err != nil {
		t.Fatalf("updating ConfigMap: %v", err)
	}
	late.waitFor(t, "update:cm-new")
	if n := early.count("update:cm-new"); n != 1 {
		t.Errorf("the early handler was told of the update %d times, want once", n)
	}

	if err := informer.RemoveEventHandler(earlyReg); err != nil {
		t.Fatalf("RemoveEventHandler: %v", err)
	}
	if err := tenant.Delete(ctx, created); err != nil {
		t.Fatalf("deleting ConfigMap: %v", err)
	}
	late.waitFor(t, "delete:cm-new")
	// Both would have been told in the same call: the removed one was not.
	if n := early.count("delete:cm-new"); n != 0 {
		t.Errorf("a removed handler was told of a deletion")
	}

	stop()
	<-done
	if !informer.IsStopped() {
		t.Error("the informer does not say it stopped")
	}
	if _, err := informer.AddEventHandler(newRecorder().handler()); err == nil {
		t.Error("a stopped informer took a handler")
	}
}
