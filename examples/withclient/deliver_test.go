package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/clusterregistry/clusterregistrytest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A message to a tenant that does not run is left, not retried on a timer;
// the tenant's start brings it back through the clusters' states, and it
// is delivered. The clusters and both clusters' clients are fakes.
func TestAMessageWaitsForItsTenantWithoutPolling(t *testing.T) {
	ctx := t.Context()
	msg := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: MessagesNamespace, Name: "welcome", Labels: map[string]string{LabelTo: "tenant-2"}},
		Data:       map[string]string{"text": "hello"},
	}
	host := fake.NewClientBuilder().WithObjects(msg).Build()
	tenant := fake.NewClientBuilder().Build()
	clusters := &clusterregistrytest.Clusters{}
	d := &Deliverer{Host: host, Clusters: clusters}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(msg)}

	if res, err := d.Reconcile(ctx, req); err != nil || !res.IsZero() {
		t.Fatalf("to a tenant that is not there: %+v, %v; want nothing, and no retry", res, err)
	}

	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer queue.ShutDown()
	if err := clusterregistry.StateChanges(clusters, d.messagesTo).Start(ctx, queue); err != nil {
		t.Fatal(err)
	}
	clusters.Run("tenant-1", fake.NewClientBuilder().Build())
	clusters.Run("tenant-2", tenant)
	// The source maps the states in order: tenant-1's first, which
	// queues nothing.
	tenantrytest.Eventually(t, 5*time.Second, "tenant-2's start queued its message", func(context.Context) (bool, error) {
		return queue.Len() > 0, nil
	})
	if got, _ := queue.Get(); got != req || queue.Len() != 0 {
		t.Fatalf("the tenants' starts queued %v (and %d more), want %v alone", got, queue.Len(), req)
	}
	if _, err := d.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var delivered corev1.ConfigMap
	if err := tenant.Get(ctx, client.ObjectKey{Namespace: "default", Name: "welcome"}, &delivered); err != nil || delivered.Data["text"] != "hello" {
		t.Fatalf("delivered: %+v, %v", delivered.Data, err)
	}
}
