package controlplane_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The control-plane packages stand below the syncers: they share the
// labels through the API package, and import nothing of pkg/syncer.
func TestBelowTheSyncers(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/tenantry/tenantry/pkg/controlplane/...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %q: too few", deps)
	}
	for _, dep := range deps {
		if dep == "github.com/tenantry/tenantry/pkg/syncer" || strings.HasPrefix(dep, "github.com/tenantry/tenantry/pkg/syncer/") {
			t.Errorf("pkg/controlplane imports %s", dep)
		}
	}
}
