// Command helloworld logs "cluster / namespace / name" for every Pod event
// in every tenant cluster: the smallest multi-cluster controller there is.
package main

import (
	"context"
	"fmt"

	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/examples/internal/devclusters"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// Module registers, in each cluster it is spawned for, a reconciler that
// logs every Pod event as "cluster / namespace / name". The logger it gets
// already carries the cluster; the line says it in words too.
var Module = fx.Module("helloworld", fx.Invoke(func(t clusterregistry.Tenant) error {
	return builder.ControllerManagedBy(t.Manager).
		Named(t.ClusterName + "-helloworld"). // per-cluster name: per-cluster metrics
		For(&corev1.Pod{}).
		Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			t.Logger.Info(fmt.Sprintf("%s / %s / %s", t.ClusterName, req.Namespace, req.Name))
			return reconcile.Result{}, nil
		}))
}))

func main() { devclusters.Main(Module) }
