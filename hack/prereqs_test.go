// Package hack_test checks the scripts of hack/ that make runs before it
// builds anything.
package hack_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pathWithout is a directory of links to every program on this machine's
// PATH but hidden, for a PATH on which those are missing.
func pathWithout(t *testing.T, hidden ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if contains(hidden, name) {
				continue
			}
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				continue // an earlier PATH entry has it
			}
			if err := os.Symlink(filepath.Join(d, name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// prereqs runs hack/prereqs.sh --check (it installs nothing) on PATH, and
// returns its exit status and what it printed.
func prereqs(t *testing.T, path string) (int, string) {
	t.Helper()
	cmd := exec.Command("bash", "prereqs.sh", "--check")
	cmd.Env = append(os.Environ(), "PATH="+path)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("running prereqs.sh: %v", err)
	return 0, ""
}

// The script says in one line what is missing and the command that
// installs it, and tells the build apart from real nodes by its exit
// status: 1 for the build (make stops), 2 for real nodes (make goes on
// with simulated nodes, or CI=true stops).
func TestPrereqs(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian machine: the script's package names are Debian's")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}

	code, out := prereqs(t, pathWithout(t, "go"))
	if code != 1 || !strings.Contains(out, "cannot build: missing Debian packages golang-go") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("without go: exit %d, %q; want 1 and one line naming golang-go", code, out)
	}

	code, out = prereqs(t, pathWithout(t, "iptables", "conntrack", "musl-gcc"))
	for _, want := range []string{"no real nodes here", "Debian packages musl-tools iptables conntrack",
		"Fix: sudo apt-get install -y musl-tools iptables conntrack"} {
		if !strings.Contains(out, want) {
			t.Errorf("without iptables, conntrack and musl-gcc: %q lacks %q", out, want)
		}
	}
	if code != 2 || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("without iptables, conntrack and musl-gcc: exit %d, %q; want 2 and one line", code, out)
	}

	if os.Geteuid() == 0 {
		if code, out := prereqs(t, os.Getenv("PATH")); code != 0 && !strings.Contains(out, "Debian packages") {
			t.Errorf("as root with every command: exit %d, %q", code, out)
		}
	}
}
