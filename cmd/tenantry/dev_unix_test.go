//go:build unix

package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeDev writes a tenantry-dev into dir that prints who it is, its
// process id and its arguments, one a line, and exits with code 7.
func fakeDev(t *testing.T, dir, who string) {
	t.Helper()
	script := "#!/bin/sh\necho " + who + "\necho pid $$\nfor a in \"$@\"; do echo \"arg <$a>\"; done\nexit 7\n"
	if err := os.WriteFile(filepath.Join(dir, devBinary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// runTenantry runs binary (this test binary, as the CLI) with args and
// $PATH set to path, and returns its output, exit code and process id.
func runTenantry(t *testing.T, binary, path string, args ...string) (string, int, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), runCLIEnv+"=1", "PATH="+path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running %s: %v", binary, err)
	}
	return out.String(), cmd.ProcessState.ExitCode(), cmd.Process.Pid
}

// `tenantry dev [flags]`, the contract's verb, runs `tenantry-dev up
// [flags]` found on $PATH in place of itself: the same process, so that
// signals go straight to it, and its exit code is tenantry dev's.
func TestDevRunsTenantryDevUp(t *testing.T) {
	path := t.TempDir()
	fakeDev(t, path, "on-path")
	out, code, pid := runTenantry(t, os.Args[0], path, "dev", "--tenants=1", "--dir", "/tmp/a dir", "--help")
	want := "on-path\npid " + strconv.Itoa(pid) + "\narg <up>\narg <--tenants=1>\narg <--dir>\narg </tmp/a dir>\narg <--help>\n"
	if code != 7 || out != want {
		t.Errorf("tenantry dev: exit %d, output\n%s\nwant exit 7 and\n%s", code, out, want)
	}
}

// tenantry-dev beside the tenantry binary, as make build leaves them in
// bin/, wins over one on $PATH.
func TestDevFindsTenantryDevBesideItself(t *testing.T) {
	bin, path := t.TempDir(), t.TempDir()
	fakeDev(t, bin, "beside")
	fakeDev(t, path, "on-path")
	tenantry := filepath.Join(bin, "tenantry")
	if err := os.Link(os.Args[0], tenantry); err != nil {
		copyFile(t, os.Args[0], tenantry)
	}
	out, code, _ := runTenantry(t, tenantry, path, "dev")
	if code != 7 || !strings.HasPrefix(out, "beside\n") || !strings.Contains(out, "arg <up>\n") {
		t.Errorf("tenantry dev with tenantry-dev beside it and on $PATH: exit %d, output\n%s\nwant exit 7 from the one beside it", code, out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
