package pods_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A tenant cannot get past its budget through what the budget does not
// see: a Pod that states no CPU request while the budget counts
// requests.cpu is refused (as ResourceQuota refuses it) and its namespace
// is not made in the host, since nothing goes in it; and host namespaces
// themselves are counted (count/namespaces), each refused one telling the
// tenant why.
func TestTheBudgetCountsNamespacesAndUnstatedRequests(t *testing.T) {
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Tenants: 1, Syncers: builtin.All(),
		Syncer: syncer.Options{Budget: corev1.ResourceList{
			"count/namespaces":         resource.MustParse("3"),
			corev1.ResourceRequestsCPU: resource.MustParse("1"),
		}},
	})
	ctx := t.Context()
	tenant := w.Tenants["tenant-1"]
	hostNamespaces := func(ctx context.Context) (int, error) {
		var list corev1.NamespaceList
		err := w.Host.List(ctx, &list, client.MatchingLabels{syncer.LabelCluster: "tenant-1"})
		return len(list.Items), err
	}

	if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}); err != nil {
		t.Fatal(err)
	}
	bare := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bare", Name: "p"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tenant.Create(ctx, bare); err != nil {
		t.Fatal(err)
	}
	syncertest.ExpectHostRejected(t, tenant, "bare", "p", "counts requests.cpu, and container app states no requests.cpu")
	if err := w.Host.Get(ctx, client.ObjectKey{Name: w.HostKey("tenant-1", "bare", "p").Namespace}, &corev1.Namespace{}); err == nil {
		t.Errorf("a host namespace was made for a tenant namespace whose every object was refused")
	}

	// Five namespaces, each with a ConfigMap: three host namespaces at
	// most, whatever the order the syncs reach them in.
	for i := range 5 {
		ns := fmt.Sprintf("team-%d", i)
		if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		if err := tenant.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, time.Minute, "three host namespaces, and two ConfigMaps refused on count/namespaces", func(ctx context.Context) (bool, error) {
		n, err := hostNamespaces(ctx)
		if err != nil {
			return false, err
		}
		refused := 0
		for i := range 5 {
			for _, e := range syncertest.Events(t, tenant, fmt.Sprintf("team-%d", i), "settings", syncer.ReasonHostRejected) {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "count/namespaces would be 4, over 3") {
					refused++
					break
				}
			}
		}
		return n == 3 && refused == 2, fmt.Errorf("%d host namespaces, %d ConfigMaps refused", n, refused)
	})
	tenantrytest.Consistently(t, 3*time.Second, 300*time.Millisecond, "three host namespaces", func(ctx context.Context) (bool, error) {
		n, err := hostNamespaces(ctx)
		return n == 3, fmt.Errorf("%d host namespaces (%v)", n, err)
	})
}
