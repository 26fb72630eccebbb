// Command tenantry is Tenantry's command-line tool, what an operator runs.
//
//	tenantry create NAME                       create a tenant cluster whose control plane Tenantry runs
//	tenantry connect NAME                      a kubeconfig for it, and a port forwarded to its API server
//	tenantry register NAME --kubeconfig FILE   register a tenant cluster run elsewhere
//	tenantry list                              the VirtualClusters at a glance
//	tenantry snapshot NAME --out FILE          a snapshot of a tenant whose control plane Tenantry runs
//	tenantry restore NAME --from FILE          a tenant made again from a snapshot
//	tenantry sleep NAME, tenantry wake NAME    stop a tenant's Pods in the host, and start them again
//	tenantry dev                               start a local host, tenants and the controller-manager
//
// Run `tenantry <command> --help` for a command's flags. `tenantry dev`
// runs `tenantry-dev up` (cmd/tenantry-dev, the development tools: the
// dev environment, the demo, the bench and the conformance runner),
// found beside this binary or on $PATH: this binary links none of them.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/go-logr/logr"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	"github.com/tenantry/tenantry/providers"
)

// program is bin/tenantry's commands.
var program = cli.Program{
	Name:     "tenantry",
	Commands: []cli.Command{createCommand, connectCommand, registerCommand, listCommand, snapshotCommand, restoreCommand, sleepCommand, wakeCommand, devCommand},
	Note:     "The development tools (the dev environment, demo, bench, conformance) are " + devBinary + "'s: run '" + devBinary + " help'.",
}

// devVerbs were bin/tenantry's and are bin/tenantry-dev's.
var devVerbs = []string{"demo", "bench", "conformance"}

func main() {
	// client-go's and controller-runtime's logs go nowhere: the commands
	// say what went wrong themselves.
	providers.SetProcessLoggers(logr.Discard())
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && slices.Contains(devVerbs, args[0]) {
		fmt.Fprintf(stderr, "tenantry: %s is a development tool, in %s: run '%s %s' (make build builds it into bin/)\n", args[0], devBinary, devBinary, strings.Join(args, " "))
		return 2
	}
	return program.Run(args, stdout, stderr)
}
