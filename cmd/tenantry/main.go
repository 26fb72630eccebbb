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
	"io"
	"os"

	"github.com/go-logr/logr"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	"github.com/tenantry/tenantry/providers"
)

// program is bin/tenantry's commands.
var program = cli.Program{
	Name:     "tenantry",
	Commands: []cli.Command{registerCommand, listCommand, devCommand, demoCommand, benchCommand, conformanceCommand},
	Hidden:   []cli.Command{benchFloorCommand},
}

func main() {
	// Until a command routes them somewhere (dev and demo: into the
	// manager's log), client-go's and controller-runtime's logs go nowhere.
	providers.SetProcessLoggers(logr.Discard())
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return program.Run(args, stdout, stderr)
}
