package virtualcluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/sharding"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A VirtualCluster deleted without its finalizer while the replica that
// held it is gone leaves no Lease behind: the replica that owns its name
// takes the Lease from the dead holder and deletes it.
func TestLeaseOfAVirtualClusterGoneWithItsHolderIsRemoved(t *testing.T) {
	_, host := startHost(t, 0)
	run := func(id string) (*sharding.Coordinator, func()) {
		co, err := sharding.New(host, sharding.Options{Namespace: "default", Group: "tenantry", Identity: id,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RenewPeriod: 250 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- co.Run(ctx) }()
		var once sync.Once
		stop := func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		return co, stop
	}
	lease := client.ObjectKey{Namespace: "default", Name: "tenantry-key-gone"}

	// Replica a holds the VirtualCluster's Lease, then dies.
	a, stopA := run("a")
	tenantrytest.Eventually(t, 10*time.Second, "a takes the VirtualCluster's Lease", func(ctx context.Context) (bool, error) {
		return a.Acquire(ctx, "gone")
	})
	stopA()
	if err := host.Get(t.Context(), lease, &coordinationv1.Lease{}); err != nil {
		t.Fatalf("the Lease after its holder died: %v; want it left behind", err)
	}

	// The VirtualCluster is gone; replica b, which owns its name now,
	// reconciles it.
	b, _ := run("b")
	r, _ := newReconciler(t, host, host)
	r.Shards = b
	tenantrytest.Eventually(t, 20*time.Second, "the Lease removed", func(ctx context.Context) (bool, error) {
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "gone"}})
		if err != nil {
			return false, err
		}
		err = host.Get(ctx, lease, &coordinationv1.Lease{})
		return apierrors.IsNotFound(err), fmt.Errorf("Lease: %v (requeue after %s)", err, res.RequeueAfter)
	})
}
