package controlplane

import (
	"strings"
	"testing"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// A version is one the manager runs, one minor version on from the one
// that runs, or the same.
func TestCheckVersion(t *testing.T) {
	r := &Reconciler{opts: Options{Version: "v1.37.2", Versions: []string{"v1.36.4", "v1.37.2", "v1.38.0", "v1.39.1"}}}
	for _, tc := range []struct {
		want, running, reason string
	}{
		{"v1.37.2", "", ""},
		{"v1.37.2", "v1.37.2", ""},
		{"v1.38.0", "v1.37.2", ""},
		{"v1.39.1", "v1.37.2", tenantryv1alpha1.ReasonVersionSkew},
		{"v1.36.4", "v1.37.2", tenantryv1alpha1.ReasonVersionSkew},
		{"v1.40.0", "v1.37.2", tenantryv1alpha1.ReasonUnknownVersion},
		{"v1.35.0", "", tenantryv1alpha1.ReasonUnknownVersion},
	} {
		out, ok := r.checkVersion(tc.want, tc.running)
		if ok != (tc.reason == "") || out.reason != tc.reason {
			t.Errorf("%s from %q: ok %v, reason %q, want %q", tc.want, tc.running, ok, out.reason, tc.reason)
		}
		if !ok && (!out.warn || !strings.Contains(out.message, tc.want)) {
			t.Errorf("%s from %q: message %q, warn %v: want a Warning naming the version", tc.want, tc.running, out.message, out.warn)
		}
	}
}

func TestManagerPeers(t *testing.T) {
	r := &Reconciler{opts: Options{ManagerNamespace: "tenantry-system", ManagerCIDRs: []string{"10.0.0.0/24"}}}
	peers := r.managerPeers()
	if len(peers) != 2 || peers[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "tenantry-system" || peers[1].IPBlock.CIDR != "10.0.0.0/24" {
		t.Errorf("peers %+v", peers)
	}
	if peers := (&Reconciler{}).managerPeers(); len(peers) != 0 {
		t.Errorf("no manager namespace nor CIDRs: peers %+v", peers)
	}
}
