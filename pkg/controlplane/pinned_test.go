package controlplane_test

import (
	"os"
	"strings"
	"testing"

	"github.com/tenantry/tenantry/pkg/controlplane"
)

// The pinned releases are those the kit builds images of.
func TestPinnedReleases(t *testing.T) {
	gomod, err := os.ReadFile("../../hack/tools/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gomod), "\tk8s.io/kubernetes "+controlplane.PinnedVersion+"\n") {
		t.Errorf("hack/tools/go.mod does not pin k8s.io/kubernetes %s", controlplane.PinnedVersion)
	}
	kit, err := os.ReadFile("../../hack/node/cmd/kitregistry/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kit), `"`+controlplane.PinnedEtcdImage+`"`) {
		t.Errorf("the kit's registry serves no %s", controlplane.PinnedEtcdImage)
	}
}
