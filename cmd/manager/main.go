// Command manager is Tenantry's controller-manager. It runs in the
// management (host) cluster, watches VirtualClusters, and runs one set of
// tenant controllers per tenant cluster.
//
//	manager --kubeconfig host.kubeconfig
//
// Run `manager --help` for its flags. A host API server that does not
// answer at start is waited for (with /readyz not ready meanwhile). SIGINT
// or SIGTERM stops every tenant cluster's controllers, then the manager,
// and exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tenantry/tenantry/cmd/internal/managerapp"
	"github.com/tenantry/tenantry/providers"
)

// startTimeout bounds building and starting the app.
const startTimeout = time.Minute

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	var opts managerapp.Options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: manager [flags]\n\nTenantry's controller-manager: runs the controllers of every VirtualCluster's tenant cluster.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "manager: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "manager: %v\n", err)
		return 2
	}

	log, err := providers.NewLogger(opts.Logger)
	if err != nil {
		fmt.Fprintf(stderr, "manager: %v\n", err)
		return 1
	}
	providers.SetMemoryLimit(log)
	providers.SetGCPercent(log)
	// A host that is away at start is waited for, not a crash loop.
	waitCtx, stopWaiting := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = providers.WaitForHost(waitCtx, opts.Options, log)
	signalled := waitCtx.Err() != nil
	stopWaiting()
	switch {
	case signalled: // also when it came just as the host answered
		log.Info("stopped while waiting for the host API server")
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "manager: %v\n", err)
		return 1
	}

	app := managerapp.New(opts)
	if err := app.Err(); err != nil {
		fmt.Fprintf(stderr, "manager: %v\n", err)
		return 1
	}
	// The process-wide loggers, once the process is sure to run (tests
	// call run in-process for its errors).
	providers.SetProcessLoggers(log)
	startCtx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		fmt.Fprintf(stderr, "manager: starting: %v\n", err)
		return 1
	}
	signal := <-app.Wait() // SIGINT, SIGTERM, or the manager stopping on its own
	stopCtx, cancel := context.WithTimeout(context.Background(), managerapp.StopTimeout(opts))
	defer cancel()
	if err := app.Stop(stopCtx); err != nil {
		fmt.Fprintf(stderr, "manager: stopping: %v\n", err)
		return 1
	}
	return signal.ExitCode
}
