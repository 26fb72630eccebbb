// Command image builds the controller-manager's OCI image without a Docker
// engine, a container runtime or a registry: `make image` runs it on a
// statically linked bin/manager.
//
// The image starts from nothing (empty.Image, no base image: none could be
// pulled here, and none is needed). Its one layer holds the binary at
// /manager and a two-line /etc/passwd and /etc/group; it has no shell and
// no other program. It runs as 65532:65532 with the entrypoint /manager.
// Every timestamp in it is --created, so the same binary and flags give
// the same image digest on every build.
//
// It writes an OCI image layout directory (--layout) and a `docker save`
// tarball (--tarball: docker load, ctr images import, kind load
// image-archive), both naming the image --name.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// binaryPath is where the binary lives in the image, and the entrypoint.
	binaryPath = "/manager"
	// user is the image's user: distroless's "nonroot", numeric so that the
	// kubelet can check runAsNonRoot without a passwd lookup.
	user    = "65532:65532"
	imageOS = "linux"

	// Annotation keys for the layout's index.json: the tag alone (as the OCI
	// image layout spec and skopeo use it) and the full name (as containerd
	// and BuildKit use it).
	refNameAnnotation        = "org.opencontainers.image.ref.name"
	containerdNameAnnotation = "io.containerd.image.name"

	sourceDateEpochEnv = "SOURCE_DATE_EPOCH"
)

// passwd and group name uid and gid 65532 "nonroot". The manager does not
// need them (User is numeric); they give the uid a name wherever one is
// looked up inside the image: os/user (its pure-Go lookup reads these
// files) finds it instead of failing with "unknown userid", `docker run
// --user nonroot` works, and scanners see a declared non-root user, as
// with distroless/static:nonroot, the Dockerfile's base. The home directory
// is / (config/manager mounts the root filesystem read-only anyway), and
// the login shell names a program that is not there: nobody logs in.
const (
	passwd = "nonroot:x:65532:65532:nonroot:/:/sbin/nologin\n"
	group  = "nonroot:x:65532:\n"
)

// errFlags marks an error that the flag package has already printed, with
// the usage.
var errFlags = errors.New("bad flags")

// options is what the flags say.
type options struct {
	binary  string
	layout  string
	tarball string
	name    string
	arch    string
	variant string
	labels  map[string]string
	created time.Time
}

// labelFlag collects repeated --label key=value flags.
type labelFlag map[string]string

func (l labelFlag) String() string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]string, 0, len(keys))
	for _, k := range keys {
		pairs = append(pairs, k+"="+l[k])
	}
	return strings.Join(pairs, ",")
}

func (l labelFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return fmt.Errorf("%q is not key=value", s)
	case strings.TrimSpace(k) == "":
		return fmt.Errorf("%q has an empty key", s)
	case v == "":
		return fmt.Errorf("label %q has an empty value", k)
	}
	if old, dup := l[k]; dup {
		return fmt.Errorf("label %q given twice (%q and %q)", k, old, v)
	}
	l[k] = v
	return nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the program: it parses args, builds the image, writes it, and
// prints the image's digest. It returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlags): // the flag package has said what
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "image: %v\n", err)
		return 2
	}
	digest, err := build(opts)
	if err != nil {
		fmt.Fprintf(stderr, "image: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s %s\n", opts.name, digest)
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	labels := labelFlag{}
	var created string
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.binary, "binary", "", "the statically linked linux binary to put at "+binaryPath+" (required)")
	fs.StringVar(&o.layout, "layout", "", "write the image into this OCI image layout directory, replacing an earlier layout there")
	fs.StringVar(&o.tarball, "tarball", "", "write the image as a docker-save tarball to this file (docker load, ctr images import, kind load image-archive)")
	fs.StringVar(&o.name, "name", "", "the image's name with an explicit tag, e.g. tenantry/manager:v0.1.0 (required)")
	fs.StringVar(&o.arch, "arch", "", "the image's architecture, as GOARCH spells it (default: the binary's); must match the binary")
	fs.StringVar(&o.variant, "variant", "", "the image's architecture variant, e.g. v7 for GOARM=7 (default: none)")
	fs.Var(labels, "label", "a config label key=value; repeat for more")
	fs.StringVar(&created, "created", "", "the creation time of the image and of every file in it, in Unix seconds (default: $"+sourceDateEpochEnv+", else 0)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: image --binary FILE --name NAME:TAG [--layout DIR] [--tarball FILE] [--label k=v]...\n\nBuilds an OCI image of one static binary, with no base image.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%w: %w", errFlags, err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.binary == "" {
		return o, errors.New("--binary is required")
	}
	if o.name == "" {
		return o, errors.New("--name is required")
	}
	if o.layout == "" && o.tarball == "" {
		return o, errors.New("nothing to write: give --layout, --tarball or both")
	}
	if _, err := parseName(o.name); err != nil {
		return o, err
	}
	o.labels = labels

	if created == "" {
		created = os.Getenv(sourceDateEpochEnv)
	}
	if created == "" {
		created = "0"
	}
	secs, err := strconv.ParseInt(created, 10, 64)
	if err != nil {
		return o, fmt.Errorf("--created (or $%s) %q is not Unix seconds: %w", sourceDateEpochEnv, created, err)
	}
	if secs < 0 {
		return o, fmt.Errorf("--created (or $%s) %d is before 1970", sourceDateEpochEnv, secs)
	}
	o.created = time.Unix(secs, 0).UTC()
	return o, nil
}

// parseName parses an image name that must carry its own tag: a build
// that silently became ":latest" is the mistake this refuses.
func parseName(s string) (name.Tag, error) {
	tag, err := name.NewTag(s)
	if err != nil {
		return name.Tag{}, fmt.Errorf("--name %q: %w", s, err)
	}
	if last := s[strings.LastIndex(s, "/")+1:]; !strings.Contains(last, ":") {
		return name.Tag{}, fmt.Errorf("--name %q has no tag (want e.g. %s:v0.1.0)", s, s)
	}
	return tag, nil
}

// build builds the image and writes what opts ask for. It returns the
// image's manifest digest.
func build(opts options) (v1.Hash, error) {
	tag, err := parseName(opts.name)
	if err != nil {
		return v1.Hash{}, err
	}
	if opts.layout != "" {
		// Before the work, not after it.
		if err := replaceableLayout(opts.layout); err != nil {
			return v1.Hash{}, err
		}
	}
	img, err := buildImage(opts)
	if err != nil {
		return v1.Hash{}, err
	}
	if opts.layout != "" {
		if err := writeLayout(opts.layout, img, tag); err != nil {
			return v1.Hash{}, err
		}
	}
	if opts.tarball != "" {
		if err := writeTarball(opts.tarball, img, tag); err != nil {
			return v1.Hash{}, err
		}
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image digest: %w", err)
	}
	return digest, nil
}

// buildImage makes the image in memory.
func buildImage(opts options) (v1.Image, error) {
	bin, err := os.ReadFile(opts.binary)
	if err != nil {
		return nil, fmt.Errorf("--binary: %w", err)
	}
	arch, err := checkBinary(opts.binary, bin, opts.arch)
	if err != nil {
		return nil, err
	}

	layerTar, err := layerTarball(bin, opts.created)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	// gzip's default level: a tenth smaller than the library's BestSpeed,
	// and BestCompression costs twice the time for 1% more. Compressed
	// once, then cached for the layout and the tarball.
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Created:      v1.Time{Time: opts.created},
		OS:           imageOS,
		Architecture: arch,
		Variant:      opts.variant,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: []string{binaryPath},
			User:       user,
			WorkingDir: "/",
			Labels:     opts.labels,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: opts.created},
			CreatedBy: "hack/image: " + binaryPath + ", /etc/passwd, /etc/group",
			Comment:   "the binary, and the nonroot user 65532",
		},
		MediaType: types.OCILayer,
	})
	if err != nil {
		return nil, fmt.Errorf("add layer: %w", err)
	}
	return img, nil
}

// elfArch maps an ELF machine to GOARCH, for the architectures Go builds
// for Linux.
func elfArch(f *elf.File) (string, bool) {
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", true
	case elf.EM_AARCH64:
		return "arm64", true
	case elf.EM_386:
		return "386", true
	case elf.EM_ARM:
		return "arm", true
	case elf.EM_PPC64:
		if f.Data == elf.ELFDATA2LSB {
			return "ppc64le", true
		}
		return "ppc64", true
	case elf.EM_S390:
		return "s390x", true
	case elf.EM_RISCV:
		return "riscv64", true
	case elf.EM_LOONGARCH:
		return "loong64", true
	}
	return "", false
}

// checkBinary refuses what could not run in the image: anything but a
// static Linux ELF executable, or one of another architecture than asked
// for. It returns the image's architecture.
func checkBinary(path string, bin []byte, wantArch string) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("--binary %s is not a Linux executable: %w", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("--binary %s is an ELF %s, not an executable", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(p.Open())
			return "", fmt.Errorf("--binary %s is dynamically linked (it needs %s, which the image does not have): build it with CGO_ENABLED=0",
				path, strings.TrimRight(string(interp), "\x00"))
		}
	}
	arch, ok := elfArch(f)
	if !ok {
		return "", fmt.Errorf("--binary %s is for ELF machine %s, which Go does not build for Linux", path, f.Machine)
	}
	if wantArch != "" && wantArch != arch {
		return "", fmt.Errorf("--binary %s is built for %s, but --arch says %s", path, arch, wantArch)
	}
	return arch, nil
}

// layerTarball is the image's one layer: /etc/passwd, /etc/group and the
// binary, owned by root (the user 65532 may run the binary, not replace
// it), every time stamp set to created.
func layerTarball(bin []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name string
		mode int64
		data []byte
		dir  bool
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: strings.TrimPrefix(binaryPath, "/"), mode: 0o755, data: bin},
	}
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Size:    int64(len(e.data)),
			ModTime: created,
			Format:  tar.FormatUSTAR,
		}
		hdr.Typeflag = tar.TypeReg
		if e.dir {
			hdr.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeLayout writes an OCI image layout holding only img, named tag, at
// dir. It builds the layout beside dir and then swaps it in, so an
// interrupted build leaves the old one; it replaces only an OCI image
// layout or an empty directory, never other files.
func writeLayout(dir string, img v1.Image, tag name.Tag) error {
	if err := replaceableLayout(dir); err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("--layout: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".image-layout-*")
	if err != nil {
		return fmt.Errorf("--layout: %w", err)
	}
	defer os.RemoveAll(tmp)

	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("--layout %s: %w", dir, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("--layout %s: %w", dir, err)
	}
	err = p.AppendImage(img,
		layout.WithAnnotations(map[string]string{
			refNameAnnotation:        tag.TagStr(),
			containerdNameAnnotation: containerdName(tag),
		}),
		layout.WithPlatform(v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}))
	if err != nil {
		return fmt.Errorf("--layout %s: %w", dir, err)
	}
	// MkdirTemp made it 0700.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("--layout: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("--layout: remove the old layout: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("--layout: %w", err)
	}
	return nil
}

// containerdName is the image's full name as containerd spells it: Docker
// Hub is docker.io, not go-containerregistry's index.docker.io.
func containerdName(tag name.Tag) string {
	if tag.RegistryStr() == name.DefaultRegistry {
		return "docker.io/" + tag.RepositoryStr() + ":" + tag.TagStr()
	}
	return tag.Name()
}

// replaceableLayout says whether dir may be replaced: it is absent, an
// empty directory, or an OCI image layout.
func replaceableLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--layout: %w", err)
	case len(entries) == 0:
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("--layout %s holds files but is not an OCI image layout (no oci-layout file); not replacing it: %w", dir, err)
	}
	return nil
}

// writeTarball writes img, named tag, as a docker-save tarball at path,
// through a temporary file beside it.
func writeTarball(path string, img v1.Image, tag name.Tag) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--tarball: %w", err)
	}
	f, err := os.CreateTemp(dir, ".image-tarball-*")
	if err != nil {
		return fmt.Errorf("--tarball: %w", err)
	}
	defer os.Remove(f.Name())
	if err := tarball.Write(tag, img, f); err != nil {
		f.Close()
		return fmt.Errorf("--tarball %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("--tarball: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--tarball %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("--tarball: %w", err)
	}
	return nil
}
