package testing_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
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
