package syncer

import (
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tenantry/tenantry/pkg/syncer/internal/hostcache"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The patroller's comparison is pure logic over two readers, so fake
// clients stand in for the tenant and the host here; the sync tests run it
// against real API servers.
func TestPatrolRoundQueuesDriftOnly(t *testing.T) {
	tr := translator{Cluster: "vc"}
	s := Syncer{
		Name:             "configmaps",
		Object:           func() client.Object { return &corev1.ConfigMap{} },
		CopyUserMetadata: true,
		Down: func(t, h client.Object) error {
			h.(*corev1.ConfigMap).Data = t.(*corev1.ConfigMap).Data
			return nil
		},
	}
	tenantCM := func(ns, name, uid, value string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}, Data: map[string]string{"v": value}}
	}
	// The copy a sync wrote, then changed to value.
	hostCM := func(tenant *corev1.ConfigMap, value string) *corev1.ConfigMap {
		h, err := s.hostCopy(tr, tenant, nil)
		if err != nil {
			t.Fatal(err)
		}
		h.(*corev1.ConfigMap).Data = map[string]string{"v": value}
		return h.(*corev1.ConfigMap)
	}

	inSync := tenantCM("default", "in-sync", "u1", "a")
	edited := tenantCM("default", "edited", "u2", "a")
	missing := tenantCM("default", "missing", "u3", "a")
	stale := tenantCM("default", "stale", "u4", "a")
	staleHost := hostCM(stale, "a")
	staleHost.Annotations[AnnotationTenantUID] = "an-earlier-uid"
	orphanHost := hostCM(tenantCM("default", "orphan", "u5", "a"), "a")
	system := tenantCM("kube-system", "system", "u6", "a")
	// Another cluster's copy: not this patroller's to see.
	othersHost := &corev1.ConfigMap{}
	translator{Cluster: "other"}.hostMetadata(tenantCM("default", "others", "u7", "a"), othersHost, false, true)

	tenant := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithObjects(inSync, edited, missing, stale, system).Build()
	host := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithIndex(&corev1.ConfigMap{}, hostcache.ClusterIndex, func(o client.Object) []string { return []string{o.GetLabels()[LabelCluster]} }).
		WithObjects(hostCM(inSync, "a"), hostCM(edited, "changed by hand"), staleHost, orphanHost, othersHost).Build()

	r := &reconciler{syncer: &s, translator: tr, tenant: tenant, hostRead: host, excluded: map[string]bool{"kube-system": true}}
	p := &patroller{r: r, gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap"), scheme: clientgoscheme.Scheme}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()

	before := testutil.ToFloat64(driftFound.WithLabelValues("vc", "configmaps"))
	if err := p.round(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	var queued []string
	for q.Len() > 0 {
		req, _ := q.Get()
		queued = append(queued, req.Name)
		q.Done(req)
	}
	sort.Strings(queued)
	want := []string{"edited", "missing", "orphan", "stale"}
	if len(queued) != len(want) {
		t.Fatalf("queued %v, want %v", queued, want)
	}
	for i := range want {
		if queued[i] != want[i] {
			t.Fatalf("queued %v, want %v", queued, want)
		}
	}
	if got := testutil.ToFloat64(driftFound.WithLabelValues("vc", "configmaps")) - before; got != 4 {
		t.Fatalf("drift found grew by %v, want 4", got)
	}

	// A sync that writes for a flagged key counts a repair, once.
	repairedBefore := testutil.ToFloat64(driftRepaired.WithLabelValues("vc", "configmaps"))
	r.settleDrift(types.NamespacedName{Namespace: "default", Name: "edited"}, true)
	r.settleDrift(types.NamespacedName{Namespace: "default", Name: "edited"}, true)
	r.settleDrift(types.NamespacedName{Namespace: "default", Name: "in-sync"}, true)
	if got := testutil.ToFloat64(driftRepaired.WithLabelValues("vc", "configmaps")) - repairedBefore; got != 1 {
		t.Fatalf("drift repaired grew by %v, want 1", got)
	}
}
