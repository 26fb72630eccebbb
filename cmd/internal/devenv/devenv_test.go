package devenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A failed run keeps a temporary directory that holds logs, and says so;
// one without logs, or a run that succeeded, leaves nothing behind.
func TestFinishKeepsLogsOfFailures(t *testing.T) {
	failure := errors.New("the Deployment did not converge")
	for _, tc := range []struct {
		name     string
		log      string
		err      error
		wantKept bool
	}{
		{"failure with logs", "started\n", failure, true},
		{"failure without logs", "", failure, false},
		{"success", "started\n", nil, false},
	} {
		dir, err := os.MkdirTemp("", "tenantry-finish-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		if err := os.WriteFile(filepath.Join(dir, "host-kube-scheduler.log"), []byte(tc.log), 0o600); err != nil {
			t.Fatal(err)
		}
		err = (&Env{dir: dir, ownDir: true}).finish(tc.err)
		_, statErr := os.Stat(dir)
		if kept := statErr == nil; kept != tc.wantKept {
			t.Errorf("%s: directory kept = %v, want %v", tc.name, kept, tc.wantKept)
		}
		if !errors.Is(err, tc.err) || tc.wantKept != (err != nil && strings.Contains(err.Error(), dir)) {
			t.Errorf("%s: finish = %v", tc.name, err)
		}
	}
}
