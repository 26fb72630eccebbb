// Command tenantry-dev is Tenantry's development tools, apart from the
// operator's CLI (cmd/tenantry):
//
//	tenantry-dev up           start a local host, tenants and the controller-manager (what `tenantry dev` runs)
//	tenantry-dev demo         the same, with a sample workload synced end to end
//	tenantry-dev bench        the benchmarks of bench/README.md (make bench)
//	tenantry-dev conformance  the upstream conformance suite against a tenant and its host (make conformance)
//
// Run `tenantry-dev <command> --help` for a command's flags. `make build`
// builds it into bin/, beside bin/tenantry, whose `tenantry dev` runs
// `tenantry-dev up`.
package main

import (
	"io"
	"os"

	"github.com/go-logr/logr"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	"github.com/tenantry/tenantry/providers"
)

// program is bin/tenantry-dev's commands.
var program = cli.Program{
	Name:     "tenantry-dev",
	Commands: []cli.Command{upCommand, demoCommand, benchCommand, conformanceCommand},
	Hidden:   []cli.Command{benchFloorCommand},
	Note:     "'tenantry dev [flags]' runs 'tenantry-dev up [flags]'.",
}

func main() {
	// Until a command routes them somewhere (up and demo: into the
	// manager's log), client-go's and controller-runtime's logs go nowhere.
	providers.SetProcessLoggers(logr.Discard())
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return program.Run(args, stdout, stderr)
}
