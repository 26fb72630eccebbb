package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

func TestLogsPodEventsOfEveryTenant(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 2})
	var (
		mu    sync.Mutex
		lines []string
	)
	log := funcr.New(func(_, args string) { mu.Lock(); lines = append(lines, args); mu.Unlock() }, funcr.Options{})
	host, err := client.New(env.Host.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	registry := clusterregistry.New(log, host, Module)
	t.Cleanup(func() { _ = registry.Close(context.Background()) })
	for _, cp := range env.Tenants {
		if err := registry.Spawn(cp.Name(), cp.Config()); err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cp.Config(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		if err := c.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"tenant-1 / default / hello", "tenant-2 / default / hello"} {
		tenantrytest.Eventually(t, 10*time.Second, "log line "+want, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, l := range lines {
				if strings.Contains(l, want) {
					return true, nil
				}
			}
			return false, nil
		})
	}
}
