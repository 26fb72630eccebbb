package pods_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
)

// A tenant that fills a new namespace at once (many Pods, ConfigMaps and
// Services in the same moment, each synced by its own controller) gets no
// Pod into the host namespace before the namespace's LimitRange and
// isolation policy exist: every host Pod has the LimitRange's defaults,
// which the host's admission gives only to a Pod created after it. (No
// quota here: a quota held back every first object already.)
func TestANewNamespaceIsReadyBeforeItsFirstPod(t *testing.T) {
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Tenants: 1, Syncers: builtin.All(),
		Syncer: syncer.Options{LimitRange: &corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type: corev1.LimitTypeContainer, Default: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		}}}},
	})
	ctx := t.Context()
	tenant := w.Tenants["tenant-1"]
	const rounds, pods = 3, 10
	for round := range rounds {
		ns := fmt.Sprintf("burst-%d", round)
		if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3*pods)
		for i := range pods {
			for _, o := range []client.Object{
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p%d", i)}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}},
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c%d", i)}},
				&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s%d", i)}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
			} {
				wg.Go(func() { errs <- tenant.Create(ctx, o) })
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		hostNS := w.HostKey("tenant-1", ns, "x").Namespace
		var list corev1.PodList
		eventually(t, time.Minute, "every host Pod of "+ns, func(ctx context.Context) (bool, error) {
			if err := w.Host.List(ctx, &list, client.InNamespace(hostNS)); err != nil {
				return false, err
			}
			return len(list.Items) == pods, fmt.Errorf("%d host Pods", len(list.Items))
		})
		for _, p := range list.Items {
			if cpu := p.Spec.Containers[0].Resources.Limits.Cpu(); cpu.String() != "100m" {
				t.Errorf("host Pod %s/%s has CPU limit %s: made before its namespace's LimitRange", p.Namespace, p.Name, cpu)
			}
		}
		if err := w.Host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: syncer.IsolationPolicyName}, &networkingv1.NetworkPolicy{}); err != nil {
			t.Errorf("the isolation policy of %s: %v", hostNS, err)
		}
	}
}
