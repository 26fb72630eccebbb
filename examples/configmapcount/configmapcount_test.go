package configmapcount_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/tenantry/tenantry/examples/configmapcount"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/mcprovider"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// Each tenant's ConfigMaps are counted into the host's ConfigMap of its
// name, and a new one in a tenant moves its count alone.
func TestCountsEachTenantsConfigMaps(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 2})
	host, err := client.New(env.Host.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	registry := clusterregistry.New(logr.Discard(), host)
	t.Cleanup(func() { _ = registry.Close(context.Background()) })
	mgr, err := mcmanager.New(env.Host.Config(), mcprovider.New(registry), manager.Options{
		Logger: logr.Discard(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := configmapcount.Setup(mgr, configmapcount.Namespace); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	tenants := map[string]client.Client{}
	for _, cp := range env.Tenants {
		if err := registry.Spawn(cp.Name(), cp.Config()); err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cp.Config(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tenants[cp.Name()] = c
	}
	// The count is what the tenant's API server lists.
	expectCount := func(cluster string) int {
		t.Helper()
		var want int
		tenantrytest.Eventually(t, 30*time.Second, "the count of "+cluster, func(ctx context.Context) (bool, error) {
			var cms corev1.ConfigMapList
			if err := tenants[cluster].List(ctx, &cms); err != nil {
				return false, err
			}
			want = len(cms.Items)
			var count corev1.ConfigMap
			if err := host.Get(ctx, client.ObjectKey{Namespace: configmapcount.Namespace, Name: cluster}, &count); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			if count.Labels[configmapcount.LabelCluster] != cluster {
				return false, fmt.Errorf("the count of %s is labelled %v", cluster, count.Labels)
			}
			return count.Data[configmapcount.CountKey] == strconv.Itoa(want), nil
		})
		return want
	}
	first, second := env.Tenants[0].Name(), env.Tenants[1].Name()
	before := map[string]int{first: expectCount(first), second: expectCount(second)}

	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("counted-%d", i)}}
		if err := tenants[first].Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	if got := expectCount(first); got != before[first]+3 {
		t.Fatalf("%s counts %d ConfigMaps after 3 more, want %d", first, got, before[first]+3)
	}
	if got := expectCount(second); got != before[second] {
		t.Fatalf("%s's count moved to %d with a change in %s", second, got, first)
	}
}
