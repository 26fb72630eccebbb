package main

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

func TestDeliversIntoTheNamedTenant(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 2})
	mgr, err := manager.New(env.Host.Config(), manager.Options{
		Logger: logr.Discard(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}, // tests build it more than once
	})
	if err != nil {
		t.Fatal(err)
	}
	registry := clusterregistry.New(logr.Discard(), mgr.GetClient())
	t.Cleanup(func() { _ = registry.Close(context.Background()) })
	if err := Setup(mgr, registry); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	host, err := client.New(env.Host.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: MessagesNamespace}}); err != nil {
		t.Fatal(err)
	}
	// Sent before the tenant spawns: delivered once it runs.
	msg := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: MessagesNamespace, Name: "welcome", Labels: map[string]string{LabelTo: "tenant-2"}},
		Data:       map[string]string{"text": "hello, tenant-2"},
	}
	if err := host.Create(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	for _, cp := range env.Tenants {
		if err := registry.Spawn(cp.Name(), cp.Config()); err != nil {
			t.Fatal(err)
		}
	}
	tenant2, err := client.New(env.Tenants[1].Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 20*time.Second, "message in tenant-2", func(ctx context.Context) (bool, error) {
		var cm corev1.ConfigMap
		err := tenant2.Get(ctx, client.ObjectKey{Namespace: "default", Name: "welcome"}, &cm)
		return err == nil && cm.Data["text"] == "hello, tenant-2", err
	})
	tenant1, err := client.New(env.Tenants[0].Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tenant1.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "welcome"}, &corev1.ConfigMap{}); err == nil {
		t.Fatal("message delivered to tenant-1 too")
	}
}
