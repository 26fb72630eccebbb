// Command configmapcount runs the configmapcount controller in a main of
// its own, the plain Go way: a Tenantry cluster registry that spawns the
// tenants of `tenantry dev --control-planes-only --dir DIR`, an mcprovider
// over it, and multicluster-runtime's manager over the host.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/tenantry/tenantry/examples/configmapcount"
	"github.com/tenantry/tenantry/examples/internal/devclusters"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/mcprovider"
)

func main() {
	dir := flag.String("dir", "/tmp/tenantry", "Directory of kubeconfigs written by `tenantry dev --dir`.")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir string) error {
	log := devclusters.Logger()
	hostCfg, tenants, err := devclusters.Load(dir)
	if err != nil {
		return err
	}
	host, err := client.New(hostCfg, client.Options{})
	if err != nil {
		return fmt.Errorf("host client: %w", err)
	}
	// The registry runs the tenants; the provider engages what it runs.
	registry := clusterregistry.New(log, host)
	defer func() { _ = registry.Close(context.Background()) }()
	provider := mcprovider.New(registry)

	mgr, err := mcmanager.New(hostCfg, provider, manager.Options{
		Logger:  log,
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		return fmt.Errorf("multicluster manager: %w", err)
	}
	if err := configmapcount.Setup(mgr, configmapcount.Namespace); err != nil {
		return fmt.Errorf("setting up the controller: %w", err)
	}
	for name, cfg := range tenants {
		if err := registry.Spawn(name, cfg); err != nil {
			return err
		}
		log.Info("spawned", "cluster", name)
	}
	// mgr.Start starts the provider too: it is a ProviderRunnable.
	return mgr.Start(ctx)
}
