package clusterregistry_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// Once a cluster's Fence says no, every request of its tenant client and
// every write of the manage-client handed to its modules fail before they
// are sent; the manage-client still reads, and another cluster is not
// fenced.
func TestFenceStopsAClustersRequests(t *testing.T) {
	var fenced atomic.Bool
	fence := func(cluster string) error {
		if cluster == "fenced" && fenced.Load() {
			return fmt.Errorf("%w: cluster %s", clusterregistry.ErrFenced, cluster)
		}
		return nil
	}
	type clients struct {
		fx.In
		Tenant client.Client
		Manage client.Client `name:"manage-client"`
		Name   string        `name:"cluster-name"`
	}
	got := make(chan clients, 2)
	r := newRegistry(t, clusterregistry.Options{Fence: fence}, fx.Invoke(func(c clients) { got <- c }))
	for _, name := range []string{"fenced", "free"} {
		if err := r.Spawn(name, shared.Tenants[0].Config()); err != nil {
			t.Fatal(err)
		}
	}
	byName := map[string]clients{}
	for range 2 {
		c := <-got
		byName[c.Name] = c
	}
	ctx := t.Context()
	create := func(c client.Client, name string) error {
		return client.IgnoreAlreadyExists(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}))
	}
	if err := create(byName["fenced"].Tenant, unique("before")); err != nil {
		t.Fatalf("a tenant write before the fence: %v", err)
	}

	fenced.Store(true)
	c := byName["fenced"]
	for what, err := range map[string]error{
		"tenant write":              create(c.Tenant, unique("after")),
		"tenant status write":       c.Tenant.Status().Update(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}),
		"manage-client write":       create(c.Manage, unique("after")),
		"manage-client status":      c.Manage.Status().Update(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}),
		"manage-client subresource": c.Manage.SubResource("status").Update(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}),
	} {
		if !errors.Is(err, clusterregistry.ErrFenced) {
			t.Errorf("%s of a fenced cluster: %v; want ErrFenced", what, err)
		}
	}
	if err := c.Manage.Get(ctx, client.ObjectKey{Name: "default"}, &corev1.Namespace{}); err != nil {
		t.Errorf("a manage-client read of a fenced cluster: %v", err)
	}
	if err := create(byName["free"].Tenant, unique("free")); err != nil {
		t.Errorf("a tenant write of another cluster: %v", err)
	}
	if err := r.Stop(context.Background(), "fenced"); err != nil {
		t.Errorf("stopping a fenced cluster: %v", err)
	}
}
