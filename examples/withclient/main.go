// Command withclient is a host-side reconciler that acts inside tenant
// clusters through the registry's WithClient: every host ConfigMap in
// namespace tenant-messages labelled messages.tenantry.dev/to: <cluster> is
// delivered, as a ConfigMap of the same name, into that tenant's default
// namespace. A message to a tenant that does not run waits, and is
// delivered when the tenant runs: the controller watches the clusters'
// states (clusterregistry.StateChanges), it does not poll.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
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
)

// Deliverer copies host messages into their tenants.
type Deliverer struct {
	Host     client.Client
	Clusters clusterregistry.Clusters
}

// Reconcile delivers one message.
func (d *Deliverer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var msg corev1.ConfigMap
	if err := d.Host.Get(ctx, req.NamespacedName, &msg); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	to := msg.Labels[LabelTo]
	err := d.Clusters.WithClient(to, func(tenant client.Client) error {
		delivered := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: msg.Name}}
		_, err := controllerutil.CreateOrUpdate(ctx, tenant, delivered, func() error {
			delivered.Data = msg.Data
			return nil
		})
		return err
	})
	if errors.Is(err, clusterregistry.ErrNotExist) || errors.Is(err, clusterregistry.ErrNotRunning) {
		return reconcile.Result{}, nil // the tenant is not (yet) here: messagesTo brings it back
	}
	return reconcile.Result{}, err
}

// messagesTo maps a cluster that runs to the messages waiting for it.
func (d *Deliverer) messagesTo(ctx context.Context, s clusterregistry.Status) []reconcile.Request {
	if s.State != clusterregistry.StateRunning {
		return nil
	}
	var msgs corev1.ConfigMapList
	if err := d.Host.List(ctx, &msgs, client.InNamespace(MessagesNamespace), client.MatchingLabels{LabelTo: s.Name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the messages to a cluster that runs", "cluster", s.Name)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(msgs.Items))
	for _, m := range msgs.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
	}
	return reqs
}

// Setup adds the Deliverer to the host manager: it watches the messages,
// and the clusters' states, so that a message waits for its tenant
// without polling.
func Setup(mgr manager.Manager, clusters clusterregistry.Clusters) error {
	d := &Deliverer{Host: mgr.GetClient(), Clusters: clusters}
	return builder.ControllerManagedBy(mgr).
		Named("message-delivery").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == MessagesNamespace && o.GetLabels()[LabelTo] != ""
		}))).
		WatchesRawSource(clusterregistry.StateChanges(clusters, d.messagesTo)).
		Complete(d)
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
