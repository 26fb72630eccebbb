// Command withclient is a host-side reconciler that acts inside tenant
// clusters through RemoteClusterRegistry.WithClient: every host ConfigMap in
// namespace tenant-messages labelled messages.tenantry.dev/to: <cluster> is
// delivered, as a ConfigMap of the same name, into that tenant's default
// namespace.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/examples/internal/devclusters"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

const (
	// MessagesNamespace is the host namespace of messages to tenants.
	MessagesNamespace = "tenant-messages"
	// LabelTo names the tenant cluster a message goes to.
	LabelTo = "messages.tenantry.dev/to"
	// notRunningRetry is how soon a message to a tenant that is not running
	// is tried again.
	notRunningRetry = 5 * time.Second
)

// Deliverer copies host messages into their tenants.
type Deliverer struct {
	Host     client.Client
	Registry *clusterregistry.RemoteClusterRegistry
}

// Reconcile delivers one message.
func (d *Deliverer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var msg corev1.ConfigMap
	if err := d.Host.Get(ctx, req.NamespacedName, &msg); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	to := msg.Labels[LabelTo]
	err := d.Registry.WithClient(to, func(tenant client.Client) error {
		delivered := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: msg.Name}}
		_, err := controllerutil.CreateOrUpdate(ctx, tenant, delivered, func() error {
			delivered.Data = msg.Data
			return nil
		})
		return err
	})
	if errors.Is(err, clusterregistry.ErrNotExist) || errors.Is(err, clusterregistry.ErrNotRunning) {
		return reconcile.Result{RequeueAfter: notRunningRetry}, nil // the tenant is not (yet) here
	}
	return reconcile.Result{}, err
}

// Setup adds the Deliverer to the host manager.
func Setup(mgr manager.Manager, registry *clusterregistry.RemoteClusterRegistry) error {
	return builder.ControllerManagedBy(mgr).
		Named("message-delivery").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == MessagesNamespace && o.GetLabels()[LabelTo] != ""
		}))).
		Complete(&Deliverer{Host: mgr.GetClient(), Registry: registry})
}

func run(ctx context.Context, dir string, log logr.Logger) error {
	hostCfg, tenants, err := devclusters.Load(dir)
	if err != nil {
		return err
	}
	mgr, err := manager.New(hostCfg, manager.Options{Logger: log, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	registry := clusterregistry.New(log, mgr.GetClient())
	defer func() { _ = registry.Close(context.Background()) }()
	if err := Setup(mgr, registry); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(func(context.Context) error { return spawnAll(registry, tenants) })); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

func spawnAll(registry *clusterregistry.RemoteClusterRegistry, tenants map[string]*rest.Config) error {
	for name, cfg := range tenants {
		if err := registry.Spawn(name, cfg); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	dir := flag.String("dir", "/tmp/tenantry", "Directory of kubeconfigs written by `tenantry dev --dir`.")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dir, devclusters.Logger()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
