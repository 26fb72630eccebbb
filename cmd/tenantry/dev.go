package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/tenantry/tenantry/cmd/internal/cli"
)

// devBinary is the program of the development tools (cmd/tenantry-dev),
// which `tenantry dev` runs.
const devBinary = "tenantry-dev"

// devCommand is the contract's `tenantry dev`: it runs `tenantry-dev up`
// with the same arguments in its place, so that the operator's binary
// links none of the test harness.
var devCommand = cli.Command{
	Name: "dev",
	Summary: "Start a local host, tenants with their own kube-controller-manager, Tenantry's controller-manager and a VirtualCluster per tenant, " +
		"until interrupted: runs `" + devBinary + " up` with the same flags (" + devBinary + " up --help lists them).",
	Exec: func(args []string, _, stderr io.Writer) int {
		path, err := findDev()
		if err != nil {
			fmt.Fprintf(stderr, "tenantry dev: %v\n", err)
			return 1
		}
		code, err := execDev(path, append([]string{"up"}, args...))
		if err != nil {
			fmt.Fprintf(stderr, "tenantry dev: running %s: %v\n", path, err)
			return 1
		}
		return code
	},
}

// findDev finds tenantry-dev beside this binary, where `make build` puts
// both, or else on $PATH.
func findDev() (string, error) {
	var beside string
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err == nil {
		path := filepath.Join(filepath.Dir(self), devBinary)
		if _, err = exec.LookPath(path); err == nil {
			return path, nil
		}
		beside = path
	}
	if !errors.Is(err, fs.ErrNotExist) {
		beside = strings.TrimPrefix(beside+": ", ": ") + err.Error()
	}
	if path, err := exec.LookPath(devBinary); err == nil {
		return path, nil
	}
	return "", fmt.Errorf("no %s to run `%s up` with: not beside this binary (%s) nor on $PATH. "+
		"`make build` builds it into bin/ beside bin/tenantry; or install it with `go install github.com/tenantry/tenantry/cmd/%s@%s`",
		devBinary, devBinary, beside, devBinary, moduleVersion())
}

// moduleVersion is the version of Tenantry this binary was built from,
// for a `go install` of the same: "latest" when it does not know
// (a build from a checkout).
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "latest"
}
