package testing

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// Stop leaves no process behind: every component, the API servers and etcd
// are gone once it returns, and so are the goroutines that watched them.
func TestStopLeavesNoProcess(t *testing.T) {
	before := goleak.IgnoreCurrent()
	env, err := Start(t.Context(), Options{Tenants: 1, TenantControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	// Each process names its control plane's directory, or etcd its data
	// directory, on its command line.
	var markers [][]byte
	for _, cp := range env.ControlPlanes() {
		markers = append(markers, []byte(cp.dir), []byte(cp.env.ControlPlane.Etcd.DataDir))
	}
	// host: etcd, kube-apiserver; tenant: those and kube-controller-manager.
	if pids := processesNaming(t, markers); len(pids) != 5 {
		t.Fatalf("found %d processes of the environment (%v), want 5", len(pids), pids)
	}
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	if pids := processesNaming(t, markers); len(pids) != 0 {
		t.Errorf("processes %v outlived Stop", pids)
	}
	goleak.VerifyNone(t, before)
}

// processesNaming lists the processes whose command line holds a marker.
func processesNaming(t *testing.T, markers [][]byte) []string {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmdlines) == 0 {
		t.Skip("no /proc to list processes with")
	}
	var pids []string
	for _, path := range cmdlines {
		cmdline, err := os.ReadFile(path)
		if err != nil {
			continue // ended meanwhile
		}
		for _, m := range markers {
			if len(m) > 0 && bytes.Contains(cmdline, m) {
				pids = append(pids, filepath.Base(filepath.Dir(path)))
				break
			}
		}
	}
	return pids
}
