package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

const (
	testName    = "tenantry/manager:test"
	testCreated = 1700000000 // 2023-11-14T22:13:20Z
)

var testLabels = map[string]string{
	"org.opencontainers.image.source":      "https://github.com/tenantry/tenantry",
	"org.opencontainers.image.version":     "v0.0.0-test",
	"org.opencontainers.image.revision":    "0123456789abcdef0123456789abcdef01234567",
	"org.opencontainers.image.title":       "tenantry-manager",
	"org.opencontainers.image.description": "The Tenantry controller-manager: Kubernetes multi-tenancy with virtual clusters",
	"org.opencontainers.image.licenses":    "NOASSERTION",
}

// shells are programs that must not be in the image, by base name.
var shells = []string{"sh", "bash", "ash", "dash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "busybox", "toybox"}

// TestImage builds the manager as `make image` does, builds its image with
// this program, and reads the image back from the layout and the tarball.
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("the image is a Linux image and the test runs its binary; this is %s", runtime.GOOS)
	}
	dir := t.TempDir()
	bin := buildManager(t, dir)

	layoutDir := filepath.Join(dir, "image")
	tarPath := filepath.Join(dir, "manager-image.tar")
	digest := runImage(t, bin, layoutDir, tarPath, testCreated)

	t.Run("layout", func(t *testing.T) {
		p, err := layout.FromPath(layoutDir)
		if err != nil {
			t.Fatalf("layout.FromPath: %v", err)
		}
		idx, err := p.ImageIndex()
		if err != nil {
			t.Fatalf("the layout's index: %v", err)
		}
		// Every blob there, of the size and digest named, the platform right.
		if err := validate.Index(idx); err != nil {
			t.Errorf("validate.Index: %v", err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatalf("the layout's index.json: %v", err)
		}
		if len(im.Manifests) != 1 {
			t.Fatalf("the layout's index names %d manifests, want 1: %+v", len(im.Manifests), im.Manifests)
		}
		desc := im.Manifests[0]
		if desc.Digest != digest {
			t.Errorf("the layout's image is %s, the program printed %s", desc.Digest, digest)
		}
		if desc.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest media type %s, want %s", desc.MediaType, types.OCIManifestSchema1)
		}
		wantAnn := map[string]string{
			"org.opencontainers.image.ref.name": "test",
			"io.containerd.image.name":          "docker.io/tenantry/manager:test",
		}
		if !reflect.DeepEqual(desc.Annotations, wantAnn) {
			t.Errorf("index annotations %v, want %v", desc.Annotations, wantAnn)
		}
		if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != runtime.GOARCH {
			t.Errorf("index platform %+v, want linux/%s", desc.Platform, runtime.GOARCH)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatalf("the layout's image: %v", err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatalf("manifest: %v", err)
		}
		if m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
			t.Errorf("manifest: config %s, layers %+v; want an OCI config and one OCI layer", m.Config.MediaType, m.Layers)
		}
		checkImage(t, img)
	})

	t.Run("tarball", func(t *testing.T) {
		tag, err := name.NewTag(testName)
		if err != nil {
			t.Fatal(err)
		}
		// With the tag, ImageFromPath fails unless manifest.json names it.
		img, err := tarball.ImageFromPath(tarPath, &tag)
		if err != nil {
			t.Fatalf("tarball.ImageFromPath(%s, %s): %v", tarPath, tag, err)
		}
		checkImage(t, img)

		// The same config as in the layout: the same image.
		p, err := layout.FromPath(layoutDir)
		if err != nil {
			t.Fatal(err)
		}
		limg, err := p.Image(digest)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := configName(t, img), configName(t, limg); a != b {
			t.Errorf("the tarball's config is %s, the layout's %s", a, b)
		}
	})

	t.Run("reproducible", func(t *testing.T) {
		again := t.TempDir()
		tar2 := filepath.Join(again, "manager-image.tar")
		if d := runImage(t, bin, filepath.Join(again, "image"), tar2, testCreated); d != digest {
			t.Errorf("a second build of the same binary is %s, the first %s", d, digest)
		}
		if a, b := fileSum(t, tarPath), fileSum(t, tar2); a != b {
			t.Errorf("the two tarballs differ: sha256 %x and %x", a, b)
		}
		// A rebuild over the first layout replaces it and keeps one image.
		if d := runImage(t, bin, layoutDir, filepath.Join(again, "over.tar"), testCreated); d != digest {
			t.Errorf("a rebuild over the layout is %s, the first %s", d, digest)
		}
		p, err := layout.FromPath(layoutDir)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := p.ImageIndex()
		if err != nil {
			t.Fatal(err)
		}
		if im, err := idx.IndexManifest(); err != nil || len(im.Manifests) != 1 {
			t.Errorf("after a rebuild the layout's index has %v (err %v), want one image", im, err)
		}
		// The time stamp is in the image: another one is another image.
		if d := runImage(t, bin, "", filepath.Join(again, "later.tar"), testCreated+1); d == digest {
			t.Errorf("--created %d gave the same digest as --created %d", testCreated+1, testCreated)
		}
	})

	t.Run("refuses", func(t *testing.T) {
		tmp := t.TempDir()
		notELF := filepath.Join(tmp, "script")
		if err := os.WriteFile(notELF, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		foreign := filepath.Join(tmp, "foreign")
		if err := os.MkdirAll(foreign, 0o755); err != nil {
			t.Fatal(err)
		}
		keep := filepath.Join(foreign, "keep.txt")
		if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		otherArch := "arm64"
		if runtime.GOARCH == "arm64" {
			otherArch = "amd64"
		}
		out := filepath.Join(tmp, "out.tar")
		for _, tc := range []struct {
			name string
			args []string
			code int
			want string
		}{
			{"no binary", []string{"--name", testName, "--tarball", out}, 2, "--binary is required"},
			{"no name", []string{"--binary", bin, "--tarball", out}, 2, "--name is required"},
			{"no output", []string{"--binary", bin, "--name", testName}, 2, "give --layout, --tarball or both"},
			{"no tag", []string{"--binary", bin, "--name", "tenantry/manager", "--tarball", out}, 2, "has no tag"},
			{"bad name", []string{"--binary", bin, "--name", "Tenantry/Manager:x", "--tarball", out}, 2, `--name "Tenantry/Manager:x"`},
			{"bad label", []string{"--binary", bin, "--name", testName, "--tarball", out, "--label", "novalue"}, 2, "is not key=value"},
			{"empty label", []string{"--binary", bin, "--name", testName, "--tarball", out, "--label", "k="}, 2, `label "k" has an empty value`},
			{"twice", []string{"--binary", bin, "--name", testName, "--tarball", out, "--label", "k=a", "--label", "k=b"}, 2, `label "k" given twice`},
			{"bad created", []string{"--binary", bin, "--name", testName, "--tarball", out, "--created", "yesterday"}, 2, `"yesterday" is not Unix seconds`},
			{"missing binary", []string{"--binary", filepath.Join(tmp, "nope"), "--name", testName, "--tarball", out}, 1, "no such file"},
			{"not ELF", []string{"--binary", notELF, "--name", testName, "--tarball", out}, 1, "is not a Linux executable"},
			{"other arch", []string{"--binary", bin, "--arch", otherArch, "--name", testName, "--tarball", out}, 1, "but --arch says " + otherArch},
			{"foreign dir", []string{"--binary", bin, "--name", testName, "--layout", foreign}, 1, "is not an OCI image layout"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				if code := run(tc.args, &stdout, &stderr); code != tc.code {
					t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
				}
				if !strings.Contains(stderr.String(), tc.want) {
					t.Errorf("stderr does not say %q:\n%s", tc.want, stderr.String())
				}
			})
		}
		if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
			t.Errorf("a directory that is not a layout was touched: %q, %v", b, err)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused build wrote %s (stat: %v)", out, err)
		}
	})
}

// buildManager builds cmd/manager as `make image` does: static, trimmed,
// stripped, for this machine so that the test can run it.
func buildManager(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "manager")
	start := time.Now()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./cmd/manager")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/manager: %v\n%s", err, b)
	}
	t.Logf("built the manager in %s", time.Since(start).Round(time.Second))
	return out
}

// runImage runs the program as `make image` does and returns the digest
// it printed.
func runImage(t *testing.T, bin, layoutDir, tarPath string, created int64) v1.Hash {
	t.Helper()
	args := []string{"--binary", bin, "--name", testName, "--arch", runtime.GOARCH, "--created", strconv.FormatInt(created, 10)}
	if layoutDir != "" {
		args = append(args, "--layout", layoutDir)
	}
	if tarPath != "" {
		args = append(args, "--tarball", tarPath)
	}
	for k, v := range testLabels {
		args = append(args, "--label", k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("image %q: exit code %d\n%s", args, code, stderr.String())
	}
	printedName, printedDigest, ok := strings.Cut(strings.TrimSpace(stdout.String()), " ")
	if !ok || printedName != testName {
		t.Fatalf("image printed %q, want %q and a digest", stdout.String(), testName)
	}
	digest, err := v1.NewHash(printedDigest)
	if err != nil {
		t.Fatalf("image printed %q: %v", stdout.String(), err)
	}
	return digest
}

// checkImage checks what an image read back holds, and runs its binary.
func checkImage(t *testing.T, img v1.Image) {
	t.Helper()
	// The manifest, config, layer digests, sizes and diff IDs agree.
	if err := validate.Image(img); err != nil {
		t.Errorf("validate.Image: %v", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	c := cfg.Config
	if !slices.Equal(c.Entrypoint, []string{"/manager"}) || len(c.Cmd) != 0 {
		t.Errorf("Entrypoint %q, Cmd %q; want [/manager] and no Cmd", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Errorf("User %q, want 65532:65532", c.User)
	}
	if uid, _, _ := strings.Cut(c.User, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("User %q runs as root", c.User)
	}
	if c.WorkingDir != "/" {
		t.Errorf("WorkingDir %q, want /", c.WorkingDir)
	}
	if !reflect.DeepEqual(c.Labels, testLabels) {
		t.Errorf("Labels %v, want %v", c.Labels, testLabels)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	created := time.Unix(testCreated, 0).UTC()
	if !cfg.Created.Time.Equal(created) {
		t.Errorf("Created %s, want %s", cfg.Created.Time, created)
	}
	for _, h := range cfg.History {
		if !h.Created.Time.Equal(created) {
			t.Errorf("history entry %+v is not from %s", h, created)
		}
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatalf("layers: %v", err)
	}
	if len(layers) != 1 || len(cfg.RootFS.DiffIDs) != 1 {
		t.Fatalf("%d layers and %d diff IDs, want 1", len(layers), len(cfg.RootFS.DiffIDs))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	defer rc.Close()

	var files, executables []string
	var passwd []byte
	exe := filepath.Join(t.TempDir(), "manager")
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("layer: %v", err)
		}
		p := path.Clean("/" + hdr.Name)
		files = append(files, p)
		if !hdr.ModTime.Equal(created) {
			t.Errorf("%s is from %s, want %s", p, hdr.ModTime, created)
		}
		if slices.Contains(shells, path.Base(p)) {
			t.Errorf("the image has a shell: %s", p)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			if hdr.Mode&0o111 != 0 {
				executables = append(executables, p)
			}
			switch p {
			case "/manager":
				f, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(f, tr); err != nil {
					t.Fatalf("extract /manager: %v", err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			case "/etc/passwd":
				if passwd, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		default:
			t.Errorf("%s is a %q entry; want only directories and regular files", p, hdr.Typeflag)
		}
	}
	if want := []string{"/etc", "/etc/group", "/etc/passwd", "/manager"}; !slices.Equal(files, want) {
		t.Errorf("the layer holds %q, want %q", files, want)
	}
	if !slices.Equal(executables, []string{"/manager"}) {
		t.Errorf("executables %q, want only /manager", executables)
	}
	if !strings.HasPrefix(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd does not name 65532 nonroot:\n%s", passwd)
	}

	f, err := elf.Open(exe)
	if err != nil {
		t.Fatalf("/manager: %v", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("/manager has a PT_INTERP program header: it is dynamically linked")
		}
	}
	f.Close()
	out, err := exec.Command(exe, "--help").CombinedOutput()
	if err != nil {
		t.Errorf("/manager --help: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Usage: manager") {
		t.Errorf("/manager --help does not say \"Usage: manager\":\n%s", out)
	}
}

func configName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatalf("config name: %v", err)
	}
	return h
}

func fileSum(t *testing.T, p string) [sha256.Size]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
