package testing_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// Start a host and two tenants, and list the namespaces of each.
func ExampleStart() {
	env, err := tenantrytest.Start(context.Background(), tenantrytest.Options{Tenants: 2})
	if err != nil {
		panic(err)
	}
	defer func() { _ = env.Stop() }()

	for _, cp := range env.ControlPlanes() {
		c, err := client.New(cp.Config(), client.Options{})
		if err != nil {
			panic(err)
		}
		var namespaces corev1.NamespaceList
		if err := c.List(context.Background(), &namespaces); err != nil {
			panic(err)
		}
		fmt.Println(cp.Name(), "serves at", cp.Address(), "with", len(namespaces.Items), "namespaces")
	}
}

// Start a host that schedules and runs Pods on two simulated nodes, and a
// tenant that runs its own kube-controller-manager, then run a Pod in the
// host.
func ExampleStart_workloads() {
	env, err := tenantrytest.Start(context.Background(), tenantrytest.Options{
		Tenants:                 1,
		HostNodes:               2,
		TenantControllerManager: true,
	})
	if err != nil {
		panic(err)
	}
	defer func() { _ = env.Stop() }()

	host, err := client.New(env.Host.Config(), client.Options{})
	if err != nil {
		panic(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
	if err := host.Create(context.Background(), pod); err != nil {
		panic(err)
	}
	// The scheduler binds it to kwok-node-1 or kwok-node-2, and kwok
	// reports it Running with an IP from that node's pod CIDR; poll for it.
}
