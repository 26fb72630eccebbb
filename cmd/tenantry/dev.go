package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

var devCommand = command{
	name:    "dev",
	summary: "Start a local host and tenant control planes, write a kubeconfig for each, and run until interrupted.",
	flags: func(fs *flag.FlagSet) func(context.Context) error {
		var (
			logOpts providers.LoggerOptions
			tenants = fs.Int("tenants", 2, "Number of tenant control planes.")
			dir     = fs.String("dir", "", "Directory for the kubeconfig files (default: a new temporary directory, removed on exit).")
			assets  = fs.String("assets", "", "Directory holding kube-apiserver and etcd (default: $"+tenantrytest.AssetsEnv+", else this binary's own directory).")
		)
		logOpts.BindFlags(fs)
		return func(ctx context.Context) error {
			return runDev(ctx, logOpts, *tenants, *dir, *assets)
		}
	},
}

func runDev(ctx context.Context, logOpts providers.LoggerOptions, tenants int, dir, assets string) error {
	log, err := providers.NewLogger(logOpts)
	if err != nil {
		return err
	}
	providers.SetProcessLoggers(log)

	if dir == "" {
		if dir, err = os.MkdirTemp("", "tenantry-dev-"); err != nil {
			return fmt.Errorf("creating kubeconfig directory: %w", err)
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating kubeconfig directory: %w", err)
	}

	if assets == "" {
		assets = defaultAssets()
	}
	log.Info("starting control planes", "tenants", tenants, "assets", assets)
	env, err := tenantrytest.Start(ctx, tenantrytest.Options{Tenants: tenants, BinaryAssetsDirectory: assets})
	if err != nil {
		return err
	}
	defer func() {
		log.Info("stopping control planes")
		if err := env.Stop(); err != nil {
			log.Error(err, "stopping control planes")
		}
	}()

	for _, cp := range env.ControlPlanes() {
		data, err := cp.Kubeconfig()
		if err != nil {
			return err
		}
		path := filepath.Join(dir, cp.Name()+".kubeconfig")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("writing kubeconfig of %s: %w", cp.Name(), err)
		}
		fmt.Printf("%-10s https://%s  KUBECONFIG=%s\n", cp.Name(), cp.Address(), path)
	}
	fmt.Println("Ready. Press Ctrl-C to stop.")
	<-ctx.Done()
	return nil
}

// defaultAssets is $KUBEBUILDER_ASSETS, or else the directory of this
// binary when kube-apiserver sits beside it, as `make build envtest` leaves
// them in bin/.
func defaultAssets() string {
	if dir := os.Getenv(tenantrytest.AssetsEnv); dir != "" {
		return dir
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	dir := filepath.Dir(self)
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return ""
	}
	return dir
}
