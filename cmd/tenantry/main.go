// Command tenantry is Tenantry's command-line tool.
//
//	tenantry register NAME --kubeconfig FILE   register a tenant cluster
//	tenantry list                              the VirtualClusters at a glance
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
	"slices"
	"strings"
	"syscall"

	"github.com/go-logr/logr"

	"github.com/tenantry/tenantry/providers"
)

// command is one subcommand: its flags, and what it does with them.
type command struct {
	name    string
	summary string
	// args names its positional arguments in its usage ("NAME"); empty
	// for a command that takes none. Flags may come before or after them.
	args  string
	nargs int
	flags func(fs *flag.FlagSet) func(ctx context.Context, in invocation) error
}

// invocation is what a command runs with besides its flags.
type invocation struct {
	// args are its positional arguments, as many as command.nargs.
	args []string
	// out receives its output; errors go to the caller's stderr.
	out io.Writer
}

var commands = []command{registerCommand, listCommand, devCommand, demoCommand, benchCommand, conformanceCommand}

// internalCommands run, but are not listed: processes that a command
// starts from this binary.
var internalCommands = []command{benchFloorCommand}

func main() {
	// Until a command routes them somewhere (dev and demo: into the
	// manager's log), client-go's and controller-runtime's logs go nowhere.
	providers.SetProcessLoggers(logr.Discard())
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range slices.Concat(commands, internalCommands) {
		if c.name != args[0] {
			continue
		}
		fs := flag.NewFlagSet("tenantry "+c.name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() {
			fmt.Fprintf(stderr, "Usage: tenantry %s [flags]\n\n%s\n\nFlags:\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
			fs.PrintDefaults()
		}
		action := c.flags(fs)
		// Flags before and after the positional arguments: the flag
		// package stops at the first argument, so parse what follows it.
		var positional []string
		for rest := args[1:]; ; rest = fs.Args()[1:] {
			if err := fs.Parse(rest); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					return 0
				}
				return 2
			}
			if fs.NArg() == 0 {
				break
			}
			positional = append(positional, fs.Arg(0))
		}
		switch {
		case len(positional) == c.nargs:
		case c.nargs == 0:
			fmt.Fprintf(stderr, "tenantry %s: unexpected arguments %q\n", c.name, positional)
			return 2
		case len(positional) < c.nargs:
			fmt.Fprintf(stderr, "tenantry %s: missing %s\n\n", c.name, c.args)
			fs.Usage()
			return 2
		default:
			fmt.Fprintf(stderr, "tenantry %s: want %s, got %q\n", c.name, c.args, positional)
			return 2
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := action(ctx, invocation{args: positional, out: stdout}); err != nil {
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
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'tenantry <command> --help' for a command's flags.")
}
