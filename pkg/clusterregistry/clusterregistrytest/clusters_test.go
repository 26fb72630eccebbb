package clusterregistrytest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/clusterregistry/clusterregistrytest"
)

// byName maps a cluster's state to a request named after the cluster and
// its state.
func byName(_ context.Context, s clusterregistry.Status) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: string(s.State), Name: s.Name}}}
}

// drain waits, up to 5s, until q holds n requests, then takes them all.
func drain(t *testing.T, q workqueue.TypedRateLimitingInterface[reconcile.Request], n int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling, with the deadline above
	}
	var got []string
	for q.Len() > 0 {
		r, _ := q.Get()
		q.Done(r)
		got = append(got, r.String())
	}
	return got
}

// StateChanges tells, at its start, the states as they are, then each
// change; once its context ends, nothing more. The fake lends a running
// cluster's client only.
func TestStateChangesOfTheFake(t *testing.T) {
	clusters := &clusterregistrytest.Clusters{}
	clusters.Run("a", fake.NewClientBuilder().Build())

	ctx, cancel := context.WithCancel(context.Background())
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer queue.ShutDown()
	src := clusterregistry.StateChanges(clusters, byName)
	if err := src.Start(ctx, queue); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, queue, 1); len(got) != 1 || got[0] != "Running/a" {
		t.Fatalf("at the start: %q, want Running/a", got)
	}
	clusters.Fail("a", errors.New("boom"))
	clusters.Run("b", fake.NewClientBuilder().Build())
	clusters.Remove("b")
	if got := drain(t, queue, 3); len(got) != 3 || got[0] != "Failed/a" || got[1] != "Running/b" || got[2] != "Stopped/b" {
		t.Fatalf("the changes: %q", got)
	}
	if err := clusters.WithClient("a", func(client.Client) error { return nil }); !errors.Is(err, clusterregistry.ErrNotRunning) {
		t.Errorf("WithClient of a failed cluster: %v, want ErrNotRunning", err)
	}
	if err := clusters.WithClient("b", func(client.Client) error { return nil }); !errors.Is(err, clusterregistry.ErrNotExist) {
		t.Errorf("WithClient of a removed cluster: %v, want ErrNotExist", err)
	}
	if err := src.Start(ctx, queue); err == nil {
		t.Error("a second Start was taken")
	}

	cancel()
	clusters.Run("c", fake.NewClientBuilder().Build())
	if got := drain(t, queue, 0); len(got) != 0 {
		t.Errorf("after its context ended: %q, want nothing", got)
	}
}
