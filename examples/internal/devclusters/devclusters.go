// Package devclusters runs the examples' main programs against the clusters
// that `tenantry dev --dir DIR` starts: it loads the kubeconfigs written
// there (host.kubeconfig, tenant-1.kubeconfig, ...) and spawns every tenant.
package devclusters

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"go.uber.org/fx"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// Load returns the host's config and each tenant's, by name, from dir.
func Load(dir string) (*rest.Config, map[string]*rest.Config, error) {
	host, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "host.kubeconfig"))
	if err != nil {
		return nil, nil, fmt.Errorf("host kubeconfig in %s (run `bin/tenantry dev --dir %s` first): %w", dir, dir, err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "tenant-*.kubeconfig"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(paths)
	tenants := map[string]*rest.Config{}
	for _, p := range paths {
		cfg, err := clientcmd.BuildConfigFromFlags("", p)
		if err != nil {
			return nil, nil, fmt.Errorf("tenant kubeconfig %s: %w", p, err)
		}
		tenants[strings.TrimSuffix(filepath.Base(p), ".kubeconfig")] = cfg
	}
	if len(tenants) == 0 {
		return nil, nil, fmt.Errorf("no tenant-*.kubeconfig in %s", dir)
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, err
	}
	return host, tenants, nil
}

// Run spawns every tenant in dir with the given tenant modules, in a
// registry whose manage-client is the host's, and runs until ctx ends.
func Run(ctx context.Context, dir string, log logr.Logger, modules ...fx.Option) error {
	hostCfg, tenants, err := Load(dir)
	if err != nil {
		return err
	}
	host, err := client.New(hostCfg, client.Options{})
	if err != nil {
		return fmt.Errorf("host client: %w", err)
	}
	registry := clusterregistry.New(log, host, modules...)
	defer func() { _ = registry.Close(context.Background()) }()
	for name, cfg := range tenants {
		if err := registry.Spawn(name, cfg); err != nil {
			return err
		}
		log.Info("spawned", "cluster", name)
	}
	<-ctx.Done()
	return nil
}

// Logger is a console logger for the examples.
func Logger() logr.Logger {
	return funcr.New(func(prefix, args string) { fmt.Println(prefix, args) }, funcr.Options{})
}

// Main is an example's main: it runs the tenant modules against the
// clusters in --dir until SIGINT or SIGTERM.
func Main(modules ...fx.Option) {
	dir := flag.String("dir", "/tmp/tenantry", "Directory of kubeconfigs written by `tenantry dev --dir`.")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, *dir, Logger(), modules...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
