package pods

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// A bound tenant Pod's status waits for its Node in the tenant: a tenant
// API server refuses kubectl logs of a Pod whose node it does not have
// (in the Pod's name: pods "<node>" not found), so the Pod must not be
// seen Running before. Once the Node is there, the status comes up.
func TestStatusWaitsForTheTenantsNode(t *testing.T) {
	tenant := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "web", Image: "web"}}},
	}
	host := tenant.DeepCopy()
	host.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3"}
	c := fake.NewClientBuilder().WithObjects(tenant).WithStatusSubresource(tenant).Build()
	up := upWith(nil)

	_, err := up(t.Context(), c, host, tenant.DeepCopy())
	if want := syncer.NotYet("the tenant has no Node %s for the Pod's status yet", "node-1"); err == nil || err.Error() != want.Error() {
		t.Fatalf("up without the tenant's Node = %v, want %q", err, want)
	}
	var got corev1.Pod
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(tenant), &got); err != nil || got.Status.Phase != "" {
		t.Fatalf("the tenant Pod's status moved before its Node existed: %+v, %v", got.Status, err)
	}

	if err := c.Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := up(t.Context(), c, host, tenant.DeepCopy()); err != nil {
		t.Fatalf("up with the tenant's Node: %v", err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(tenant), &got); err != nil || got.Status.Phase != corev1.PodRunning {
		t.Fatalf("the tenant Pod's status after its Node came: %+v, %v", got.Status, err)
	}
}
