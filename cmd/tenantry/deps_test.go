package main

import (
	"os/exec"
	"strings"
	"testing"
)

// devOnly are packages of the development tools, which bin/tenantry-dev
// links and the operator's binary must not: the test harness and what it
// starts, the bench, the dev environment, the conformance runner, and the
// upstream e2e suite.
var devOnly = []string{
	"github.com/tenantry/tenantry/pkg/testing",
	"github.com/tenantry/tenantry/internal/bench",
	"github.com/tenantry/tenantry/cmd/internal/devenv",
	"github.com/tenantry/tenantry/cmd/internal/conformance",
	"sigs.k8s.io/controller-runtime/pkg/envtest",
	"sigs.k8s.io/kwok",
	"k8s.io/kubernetes/test/e2e",
	"github.com/onsi/ginkgo",
}

// bin/tenantry, what an operator runs, links none of the development
// tools: `tenantry dev` runs bin/tenantry-dev instead.
func TestLinksNoDevelopmentTools(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/tenantry/tenantry/cmd/tenantry").Output()
	if err != nil {
		var stderr string
		if exit, ok := err.(*exec.ExitError); ok {
			stderr = string(exit.Stderr)
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %q: too few to be bin/tenantry's", deps)
	}
	for _, dep := range deps {
		for _, bad := range devOnly {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("bin/tenantry links %s, a package of the development tools (%s)", dep, bad)
			}
		}
	}
}
