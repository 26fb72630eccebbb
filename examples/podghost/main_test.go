package main

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

func TestGhostPerTenantPod(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 2, HostCRDDirectoryPaths: []string{"crd.yaml"}})
	host, err := client.New(env.Host.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	registry := clusterregistry.New(logr.Discard(), host, Module)
	t.Cleanup(func() { _ = registry.Close(context.Background()) })
	tenants := map[string]client.Client{}
	for _, cp := range env.Tenants {
		if err := registry.Spawn(cp.Name(), cp.Config()); err != nil {
			t.Fatal(err)
		}
		if tenants[cp.Name()], err = client.New(cp.Config(), client.Options{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "boo"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		if err := tenants[cp.Name()].Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
	}
	for name := range tenants {
		tenantrytest.Eventually(t, 10*time.Second, "ghost of "+name+"'s Pod", func(ctx context.Context) (bool, error) {
			g := newGhost(name + ".default.boo")
			if err := host.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
				return false, err
			}
			cluster, _, _ := unstructured.NestedString(g.Object, "spec", "cluster")
			return cluster == name, nil
		})
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "boo"}}
	if err := tenants["tenant-1"].Delete(t.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 10*time.Second, "tenant-1's ghost gone", func(ctx context.Context) (bool, error) {
		g := newGhost("tenant-1.default.boo")
		err := host.Get(ctx, client.ObjectKeyFromObject(g), g)
		return apierrors.IsNotFound(err), err
	})
	if err := host.Get(t.Context(), client.ObjectKeyFromObject(newGhost("tenant-2.default.boo")), newGhost("x")); err != nil {
		t.Fatalf("tenant-2's ghost went too: %v", err)
	}
}
