// Command tenantry is Tenantry's command-line tool.
//
//	tenantry dev    start a local host, tenants and the controller-manager
//	tenantry demo   the same, with a sample workload synced end to end
//
// Run `tenantry <command> --help` for a command's flags.
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

	"github.com/go-logr/logr"

	"github.com/tenantry/tenantry/providers"
)

// command is one subcommand: its flags, and what it does with them.
type command struct {
	name    string
	summary string
	flags   func(fs *flag.FlagSet) func(ctx context.Context) error
}

var commands = []command{devCommand, demoCommand, benchCommand, conformanceCommand}

func main() {
	// Until a command routes them somewhere (dev and demo: into the
	// manager's log), client-go's and controller-runtime's logs go nowhere.
	providers.SetProcessLoggers(logr.Discard())
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		fs := flag.NewFlagSet("tenantry "+c.name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() {
			fmt.Fprintf(stderr, "Usage: tenantry %s [flags]\n\n%s\n\nFlags:\n", c.name, c.summary)
			fs.PrintDefaults()
		}
		action := c.flags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "tenantry %s: unexpected arguments %q\n", c.name, fs.Args())
			return 2
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := action(ctx); err != nil {
			fmt.Fprintf(stderr, "tenantry %s: %v\n", c.name, err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "tenantry: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: tenantry <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'tenantry <command> --help' for a command's flags.")
}
