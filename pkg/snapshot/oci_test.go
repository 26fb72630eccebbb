package snapshot_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/tenantry/tenantry/pkg/snapshot"
	tenantrytesting "github.com/tenantry/tenantry/pkg/testing"
)

// A snapshot pushed as an OCI artifact is pulled back byte for byte; an
// image that is not a snapshot, a registry that refuses and a reference
// that is not one are errors that say so.
func TestASnapshotGoesToARegistryAndBack(t *testing.T) {
	ctx := t.Context()
	registry := tenantrytesting.NewRegistry(t)
	data := write(t, snapshot.Manifest{Cluster: "shop"}, someKeys(300))
	file := filepath.Join(t.TempDir(), "shop.tar.gz")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	dest := snapshot.OCIScheme + registry + "/tenants/shop:2026-11-29"
	digest, err := snapshot.Push(ctx, file, dest)
	if err != nil {
		t.Fatal(err)
	}
	for _, source := range []string{dest, snapshot.OCIScheme + registry + "/tenants/shop@" + digest} {
		var pulled bytes.Buffer
		if err := snapshot.Pull(ctx, source, &pulled); err != nil {
			t.Fatalf("pulling %s: %v", source, err)
		}
		if !bytes.Equal(pulled.Bytes(), data) {
			t.Fatalf("pulled %d bytes from %s, not the %d pushed", pulled.Len(), source, len(data))
		}
		if _, _, err := read(pulled.Bytes()); err != nil {
			t.Fatal(err)
		}
	}

	// An image, not a snapshot.
	image, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(registry + "/apps/web:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, image); err != nil {
		t.Fatal(err)
	}
	if err := snapshot.Pull(ctx, snapshot.OCIScheme+registry+"/apps/web:1", &bytes.Buffer{}); !errors.Is(err, snapshot.ErrNotASnapshot) {
		t.Errorf("pulling an image: %v, want ErrNotASnapshot", err)
	}
	if err := snapshot.Pull(ctx, snapshot.OCIScheme+registry+"/tenants/shop:missing", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "MANIFEST_UNKNOWN") {
		t.Errorf("pulling a tag that is not there: %v, want the registry's MANIFEST_UNKNOWN", err)
	}

	// A registry that refuses.
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"errors":[{"code":"DENIED","message":"read-only"}]}`, http.StatusForbidden)
	}))
	defer refusing.Close()
	if _, err := snapshot.Push(ctx, file, snapshot.OCIScheme+strings.TrimPrefix(refusing.URL, "http://")+"/tenants/shop:1"); err == nil || !strings.Contains(err.Error(), "DENIED: read-only") {
		t.Errorf("pushing to a registry that refuses: %v, want an error giving its answer", err)
	}

	for _, bad := range []string{"s3://bucket/shop", snapshot.OCIScheme, snapshot.OCIScheme + registry + "/Tenants/Shop:1"} {
		if _, err := snapshot.Push(ctx, file, bad); err == nil {
			t.Errorf("pushing to %q: no error", bad)
		}
	}
}

// Prune keeps a cluster's newest snapshots, and leaves alone another
// cluster's and tags that are not a snapshot's.
func TestPruneKeepsTheNewest(t *testing.T) {
	ctx := t.Context()
	repository := snapshot.OCIScheme + tenantrytesting.NewRegistry(t) + "/snapshots"
	start := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	var tags []string
	for i := range 4 {
		data := write(t, snapshot.Manifest{Cluster: "shop", TakenAt: start.Add(time.Duration(i) * time.Hour)}, someKeys(10))
		file := filepath.Join(t.TempDir(), "s.tar.gz")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tag := range []string{snapshot.Tag("shop", start.Add(time.Duration(i)*time.Hour)), snapshot.Tag("shopping", start), "latest"} {
			if i > 0 && tag != snapshot.Tag("shop", start.Add(time.Duration(i)*time.Hour)) {
				continue
			}
			if _, err := snapshot.Push(ctx, file, repository+":"+tag); err != nil {
				t.Fatal(err)
			}
			tags = append(tags, tag)
		}
	}
	deleted, err := snapshot.Registry{}.Prune(ctx, repository, "shop", 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"shop-20261129T030000Z", "shop-20261129T040000Z"}; !slices.Equal(deleted, want) {
		t.Errorf("pruned %v, want %v", deleted, want)
	}
	for _, tag := range tags {
		err := snapshot.Pull(ctx, repository+":"+tag, &bytes.Buffer{})
		if gone := slices.Contains(deleted, tag); gone != (err != nil) {
			t.Errorf("%s: pruned %v, pulled: %v", tag, gone, err)
		}
	}
}
