package main

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

func TestCopiesAndCollectsDeployments(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 1})
	host, err := client.New(env.Host.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := client.New(env.Tenants[0].Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	registry := clusterregistry.New(logr.Discard(), host, Module)
	t.Cleanup(func() { _ = registry.Close(context.Background()) })
	if err := registry.Spawn("tenant-1", env.Tenants[0].Config()); err != nil {
		t.Fatal(err)
	}

	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}
	if err := tenant.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: CopiesNamespace, Name: "tenant-1.default.web"}
	tenantrytest.Eventually(t, 10*time.Second, "copy in the host", func(ctx context.Context) (bool, error) {
		var c appsv1.Deployment
		err := host.Get(ctx, key, &c)
		return err == nil && *c.Spec.Replicas == 3 && c.Labels[LabelOrigin] == "tenant-1", err
	})

	if err := tenant.Delete(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 10*time.Second, "copy collected", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, key, &appsv1.Deployment{})
		return apierrors.IsNotFound(err), err
	})
}
