package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Without tenantry-dev, tenantry dev fails naming where it looked and how
// to get it.
func TestDevWithoutTenantryDev(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code := run([]string{"dev", "--tenants=1"}, &out, &out)
	for _, want := range []string{
		filepath.Join(filepath.Dir(self), "tenantry-dev"), "nor on $PATH", "`make build` builds it into bin/",
		"go install github.com/tenantry/tenantry/cmd/tenantry-dev@",
	} {
		if code != 1 || !strings.Contains(out.String(), want) {
			t.Errorf("tenantry dev without tenantry-dev: exit %d, %q; want exit 1 and %q", code, out.String(), want)
		}
	}
}
