// Command helloworld logs "cluster / namespace / name" for every Pod event
// in every tenant cluster: the smallest multi-cluster controller there is.
package main

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/examples/internal/devclusters"
)

// Module registers, in each cluster it is spawned for, a reconciler that
// logs every Pod event as "cluster / namespace / name". The logger it gets
// already carries the cluster; the line says it in words too.
var Module = fx.Module("helloworld", fx.Invoke(fx.Annotate(
	func(mgr manager.Manager, cluster string, log logr.Logger) error {
		return builder.ControllerManagedBy(mgr).
			Named(cluster + "-helloworld"). // per-cluster name: per-cluster metrics
			For(&corev1.Pod{}).
			Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
				log.Info(fmt.Sprintf("%s / %s / %s", cluster, req.Namespace, req.Name))
				return reconcile.Result{}, nil
			}))
	},
	fx.ParamTags(``, `name:"cluster-name"`, ``),
)))

func main() { devclusters.Main(Module) }
