// Command kitregistry builds the container images that the test kit's real
// nodes run, and serves them as the kit's own registry, so that no image is
// ever pulled from the internet.
//
//	kitregistry build --out DIR --pause FILE --busybox FILE --agnhost FILE [--tool FILE]... \
//	    --coredns FILE --coredns-version VERSION
//	kitregistry serve --layout DIR --listen ADDR
//
// The agnhost image holds what the e2e suite's specs run in it beside
// agnhost: the --tool programs of this machine (curl, dig, nc, ...), each
// at its path with the shared libraries ldd names for it, over busybox.
//
// build writes one OCI image layout holding every image under its upstream
// name (the annotation org.opencontainers.image.ref.name): the same inputs
// give the same digests. serve serves them at ADDR straight from the layout
// on disk (it streams each blob from its file, holding only the index and
// the manifests in memory), read-only, under their repository paths
// (registry.k8s.io/pause:3.10.2 is ADDR/pause:3.10.2,
// docker.io/library/busybox:1.37 ADDR/library/busybox:1.37), and answers
// GET /kit/ready with 200 once it serves them; it refuses every write. A
// node's containerd uses ADDR as the only host of registry.k8s.io and
// docker.io.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refAnnotation names an image of an OCI layout (OCI image spec).
const refAnnotation = "org.opencontainers.image.ref.name"

// The upstream names of the images, as the pinned Kubernetes release
// lists them (test/utils/image/manifest.go, and kubeadm's PauseVersion for
// the sandbox image). Change them with hack/tools' k8s.io/kubernetes.
var (
	pauseRefs   = []string{"registry.k8s.io/pause:3.10.2"}
	busyboxRefs = []string{
		"registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
		"docker.io/library/busybox:1.37",
		"docker.io/library/busybox:latest",
	}
	agnhostRefs = []string{"registry.k8s.io/e2e-test-images/agnhost:2.66.1"}
	// corednsRepository is kubeadm's; the tag is --coredns-version.
	corednsRepository = "registry.k8s.io/coredns/coredns"

	// The other images the pinned e2e suite's conformance specs run, by
	// its names (test/utils/image/manifest.go), each built here from what
	// upstream's holds: agnhost's older tag, kitten and nautilus (agnhost's
	// test-webserver and their pages), nginx, nonroot, nonewprivs,
	// glibc-dns-testing, the sample API server and the etcd it runs beside.
	agnhostPrevRefs     = []string{"registry.k8s.io/e2e-test-images/agnhost:2.55"}
	kittenRefs          = []string{"registry.k8s.io/e2e-test-images/kitten:1.8"}
	nautilusRefs        = []string{"registry.k8s.io/e2e-test-images/nautilus:1.8"}
	nginxRefs           = []string{"registry.k8s.io/e2e-test-images/nginx:1.27.0-2", "registry.k8s.io/e2e-test-images/nginx:1.28.0-2"}
	nonrootRefs         = []string{"registry.k8s.io/e2e-test-images/nonroot:1.5"}
	nonewprivsRefs      = []string{"registry.k8s.io/e2e-test-images/nonewprivs:1.4"}
	glibcDNSTestingRefs = []string{"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"}
	sampleAPIServerRefs = []string{"registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2"}
	etcdRefs            = []string{"registry.k8s.io/etcd:3.7.0-0"}
	// controlPlaneRepository holds the images of kube-apiserver and
	// kube-controller-manager, tagged with the release.
	controlPlaneRepository = "registry.k8s.io"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("kitregistry: ")
	if len(os.Args) < 2 {
		log.Fatal("usage: kitregistry build|serve [flags]")
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want build or serve", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

// builtImage is an image the kit serves: its references, its layers,
// its configuration.
type builtImage struct {
	refs   []string
	layers []v1.Layer
	config v1.Config
}

// build writes the kit's images into a new OCI layout at --out.
func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	out := fs.String("out", "", "the OCI layout directory to write (replaced)")
	pause := fs.String("pause", "", "a static pause binary (build/pause/linux/pause.c)")
	busybox := fs.String("busybox", "", "a static busybox binary")
	agnhost := fs.String("agnhost", "", "a static agnhost binary")
	coredns := fs.String("coredns", "", "a static coredns binary")
	etcd := fs.String("etcd", "", "an etcd binary")
	sampleAPIServer := fs.String("sample-apiserver", "", "a static sample-apiserver binary (k8s.io/sample-apiserver)")
	nnp := fs.String("nonewprivs", "", "a static nonewprivs binary (test/images/nonewprivs)")
	nginx := fs.String("nginx", "", "an nginx binary of this machine, with its shared libraries")
	pages := fs.String("e2e-images", "", "the pinned release's test/images directory (kitten's and nautilus's pages)")
	corednsVersion := fs.String("coredns-version", "", "the coredns binary's version, the tag of its image (v1.14.6)")
	apiServer := fs.String("kube-apiserver", "", "a kube-apiserver binary, for a provisioned tenant control plane's image")
	controllerManager := fs.String("kube-controller-manager", "", "a kube-controller-manager binary, for a provisioned tenant control plane's image")
	kubeVersion := fs.String("kube-version", "", "the pinned Kubernetes release, the tag of the control plane images (v1.37.2)")
	var releases multiFlag
	fs.Var(&releases, "control-plane-release", "a further release's control plane images: VERSION=KUBE-APISERVER,KUBE-CONTROLLER-MANAGER (repeatable)")
	var tools multiFlag
	fs.Var(&tools, "tool", "a program of this machine for the agnhost image, with its shared libraries: PATH, or IMAGEPATH=PATH (repeatable)")
	_ = fs.Parse(args)
	for flagName, v := range map[string]string{"out": *out, "pause": *pause, "busybox": *busybox, "agnhost": *agnhost, "coredns": *coredns, "coredns-version": *corednsVersion,
		"etcd": *etcd, "sample-apiserver": *sampleAPIServer, "nonewprivs": *nnp, "nginx": *nginx, "e2e-images": *pages,
		"kube-apiserver": *apiServer, "kube-controller-manager": *controllerManager, "kube-version": *kubeVersion} {
		if v == "" {
			return fmt.Errorf("build: --%s is required", flagName)
		}
	}

	base, err := busyboxLayer(*busybox)
	if err != nil {
		return err
	}
	pauseLayer, err := filesLayer(map[string]string{"pause": *pause})
	if err != nil {
		return err
	}
	// As upstream's: /agnhost-2, for the specs that override the image's
	// entrypoint with it, and porter's TLS certificate and key, which it
	// reads from its working directory.
	agnhostFiles := map[string]string{"agnhost": *agnhost, "agnhost-2": *agnhost,
		"localhost.crt": filepath.Join(*pages, "agnhost", "porter", "localhost.crt"),
		"localhost.key": filepath.Join(*pages, "agnhost", "porter", "localhost.key")}
	for _, tool := range tools {
		if err := addWithLibraries(agnhostFiles, tool); err != nil {
			return err
		}
	}
	agnhostLayer, err := filesLayer(agnhostFiles)
	if err != nil {
		return err
	}
	// As upstream's: the binary alone (its image is distroless), run as
	// nobody; a Pod gives it its Corefile.
	corednsLayer, err := filesLayer(map[string]string{"coredns": *coredns})
	if err != nil {
		return err
	}
	e2e, err := e2eLayers(*pages, *coredns, *etcd, *sampleAPIServer, *nnp, *nginx, tools)
	if err != nil {
		return err
	}
	// As upstream's: the program at /usr/local/bin (its image is
	// distroless), with the shared libraries this machine built it with;
	// the pinned release's, and each further one's.
	controlPlane := map[string][2]string{*kubeVersion: {*apiServer, *controllerManager}}
	for _, r := range releases {
		version, programs, ok := strings.Cut(r, "=")
		apiServer, controllerManager, ok2 := strings.Cut(programs, ",")
		if !ok || !ok2 || version == "" || apiServer == "" || controllerManager == "" {
			return fmt.Errorf("build: --control-plane-release %q: want VERSION=KUBE-APISERVER,KUBE-CONTROLLER-MANAGER", r)
		}
		controlPlane[version] = [2]string{apiServer, controllerManager}
	}
	var controlPlaneImages []builtImage
	for _, version := range slices.Sorted(maps.Keys(controlPlane)) {
		for i, name := range []string{"kube-apiserver", "kube-controller-manager"} {
			files := map[string]string{}
			if err := addWithLibraries(files, "/usr/local/bin/"+name+"="+controlPlane[version][i]); err != nil {
				return err
			}
			layer, err := filesLayer(files)
			if err != nil {
				return fmt.Errorf("image %s:%s: %w", name, version, err)
			}
			controlPlaneImages = append(controlPlaneImages, builtImage{[]string{controlPlaneRepository + "/" + name + ":" + version},
				[]v1.Layer{layer}, v1.Config{Entrypoint: []string{"/usr/local/bin/" + name}}})
		}
	}
	busyboxLayers := []v1.Layer{base}
	agnhostConfig := v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, WorkingDir: "/"}
	webserver := agnhostConfig
	webserver.Cmd = []string{"test-webserver"}
	previous := agnhostConfig
	previous.Env = []string{"AGNHOST_TAG=2.55"} // another image, of the same program
	images := append(controlPlaneImages, []builtImage{
		{agnhostPrevRefs, []v1.Layer{base, agnhostLayer}, previous},
		{kittenRefs, []v1.Layer{base, agnhostLayer, e2e.kitten}, webserver},
		{nautilusRefs, []v1.Layer{base, agnhostLayer, e2e.nautilus}, webserver},
		{nginxRefs, []v1.Layer{base, e2e.nginx}, v1.Config{Entrypoint: []string{"/usr/sbin/nginx", "-g", "daemon off;"}, ExposedPorts: map[string]struct{}{"80/tcp": {}}}},
		{nonrootRefs, busyboxLayers, v1.Config{Cmd: []string{"sh"}, User: "1234"}},
		{nonewprivsRefs, []v1.Layer{base, e2e.nonewprivs}, v1.Config{Cmd: []string{"nnp"}}},
		{glibcDNSTestingRefs, []v1.Layer{base, e2e.dnsTools}, v1.Config{Cmd: []string{"sh"}}},
		{sampleAPIServerRefs, []v1.Layer{base, e2e.sampleAPIServer}, v1.Config{Entrypoint: []string{"/sample-apiserver"}}},
		{etcdRefs, []v1.Layer{base, e2e.etcd}, v1.Config{Cmd: []string{"/usr/local/bin/etcd"}}},
		{pauseRefs, []v1.Layer{pauseLayer}, v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}},
		{busyboxRefs, busyboxLayers, v1.Config{Cmd: []string{"sh"}}},
		{agnhostRefs, []v1.Layer{base, agnhostLayer}, agnhostConfig},
		{[]string{corednsRepository + ":" + *corednsVersion}, []v1.Layer{corednsLayer}, v1.Config{Entrypoint: []string{"/coredns"}, User: "65532:65532", ExposedPorts: map[string]struct{}{"53/tcp": {}, "53/udp": {}}}},
	}...)

	tmp := *out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("creating the layout: %w", err)
	}
	for _, im := range images {
		img, err := image(im.layers, im.config)
		if err != nil {
			return fmt.Errorf("image %s: %w", im.refs[0], err)
		}
		for _, ref := range im.refs {
			if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{refAnnotation: ref})); err != nil {
				return fmt.Errorf("image %s: %w", ref, err)
			}
		}
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	return os.Rename(tmp, *out)
}

// image is a linux image of this machine's architecture, with layers and
// config, dated at the epoch so that its digest depends on its content
// alone.
func image(layers []v1.Layer, config v1.Config) (v1.Image, error) {
	config.Env = append(config.Env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Config:       config,
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	if img, err = mutate.AppendLayers(img, layers...); err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: time.Unix(0, 0).UTC()})
}

// e2eImageLayers are the layers of the e2e images beside agnhost's.
type e2eImageLayers struct {
	kitten, nautilus, nginx, nonewprivs, dnsTools, sampleAPIServer, etcd v1.Layer
}

// nginxConfig serves /usr/share/nginx/html on port 80, as the image
// upstream builds from nginx's own does, logging to the container's
// output.
const nginxConfig = `user root;
worker_processes 1;
error_log /dev/stderr;
pid /tmp/nginx.pid;
events {}
http {
    types { text/html html; image/jpeg jpg; application/json json; text/plain txt; }
    default_type application/octet-stream;
    access_log /dev/stdout;
    client_body_temp_path /tmp/nginx-body;
    proxy_temp_path /tmp/nginx-proxy;
    fastcgi_temp_path /tmp/nginx-fastcgi;
    uwsgi_temp_path /tmp/nginx-uwsgi;
    scgi_temp_path /tmp/nginx-scgi;
    server {
        listen 80;
        listen [::]:80;
        root /usr/share/nginx/html;
        index index.html;
    }
}
`

const nginxIndex = "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>\n<body><h1>Welcome to nginx!</h1></body></html>\n"

// e2eLayers builds the e2e images' own layers: the pages of kitten and
// nautilus from the release's test/images (pages), nginx with its
// libraries and configuration, nonewprivs setuid root as upstream's, the
// DNS tools of glibc-dns-testing (tools, with coredns at /coredns), the
// sample API server, and etcd at /usr/local/bin/etcd.
func e2eLayers(pages, coredns, etcd, sampleAPIServer, nnp, nginx string, tools []string) (e2eImageLayers, error) {
	var l e2eImageLayers
	var err error
	for _, page := range []struct {
		name  string
		layer *v1.Layer
	}{{"kitten", &l.kitten}, {"nautilus", &l.nautilus}} {
		if *page.layer, err = filesLayer(map[string]string{
			page.name + ".jpg": path.Join(pages, page.name, "html", page.name+".jpg"),
			"data.json":        path.Join(pages, page.name, "html", "data.json"),
		}); err != nil {
			return l, fmt.Errorf("image %s: %w", page.name, err)
		}
	}
	nginxFiles := map[string]string{}
	if err := addWithLibraries(nginxFiles, "/usr/sbin/nginx="+nginx); err != nil {
		return l, err
	}
	nginxEntries, err := fileEntries(nginxFiles)
	if err != nil {
		return l, err
	}
	// nginx opens its compiled-in error log before it reads its
	// configuration: its directories are there.
	for _, d := range []string{"etc/nginx/", "usr/share/", "usr/share/nginx/", "usr/share/nginx/html/", "var/log/", "var/log/nginx/", "var/lib/", "var/lib/nginx/"} {
		nginxEntries = append(nginxEntries, entry{hdr: tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}})
	}
	nginxEntries = append(nginxEntries,
		entry{hdr: tar.Header{Name: "etc/nginx/nginx.conf", Typeflag: tar.TypeReg, Mode: 0o644}, data: []byte(nginxConfig)},
		entry{hdr: tar.Header{Name: "usr/share/nginx/html/index.html", Typeflag: tar.TypeReg, Mode: 0o644}, data: []byte(nginxIndex)})
	if l.nginx, err = layer(nginxEntries); err != nil {
		return l, fmt.Errorf("image nginx: %w", err)
	}
	data, err := os.ReadFile(nnp)
	if err != nil {
		return l, err
	}
	if l.nonewprivs, err = layer([]entry{
		{hdr: tar.Header{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "usr/local/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "usr/local/bin/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "usr/local/bin/nnp", Typeflag: tar.TypeReg, Mode: 0o4755}, data: data},
	}); err != nil {
		return l, fmt.Errorf("image nonewprivs: %w", err)
	}
	dnsFiles := map[string]string{"coredns": coredns}
	for _, tool := range tools {
		if err := addWithLibraries(dnsFiles, tool); err != nil {
			return l, err
		}
	}
	if l.dnsTools, err = filesLayer(dnsFiles); err != nil {
		return l, fmt.Errorf("image glibc-dns-testing: %w", err)
	}
	if l.sampleAPIServer, err = filesLayer(map[string]string{"sample-apiserver": sampleAPIServer}); err != nil {
		return l, fmt.Errorf("image sample-apiserver: %w", err)
	}
	etcdFiles := map[string]string{}
	if err := addWithLibraries(etcdFiles, "/usr/local/bin/etcd="+etcd); err != nil {
		return l, err
	}
	if l.etcd, err = filesLayer(etcdFiles); err != nil {
		return l, fmt.Errorf("image etcd: %w", err)
	}
	return l, nil
}

// entry is one file of a layer.
type entry struct {
	hdr  tar.Header
	data []byte
}

// layer makes a gzip-compressed OCI layer of entries, in order.
func layer(entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := e.hdr
		hdr.ModTime = time.Unix(0, 0)
		hdr.Format = tar.FormatPAX
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// multiFlag is a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// addWithLibraries adds a program, and every shared library and the
// loader that ldd names for it, to files at their paths on this machine.
// tool is the program's path, or IMAGEPATH=PATH to put it elsewhere in the
// image (/usr/bin/nc=/bin/nc.openbsd).
func addWithLibraries(files map[string]string, tool string) error {
	at, program, ok := strings.Cut(tool, "=")
	if !ok {
		at, program = tool, tool
	}
	files[strings.TrimPrefix(at, "/")] = program
	out, err := exec.Command("ldd", program).CombinedOutput()
	if err != nil && strings.Contains(string(out), "not a dynamic executable") {
		return nil // static: the program alone
	}
	if err != nil {
		return fmt.Errorf("ldd %s: %w: %s", program, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", or the
		// loader "/lib64/ld-linux-x86-64.so.2 (0x...)".
		var path string
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			path = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			path = f[0]
		default:
			continue
		}
		files[strings.TrimPrefix(path, "/")] = path
	}
	return nil
}

// filesLayer is a layer of executables: their path in the image to the
// file on this machine (symbolic links followed), with the directories
// they need.
func filesLayer(files map[string]string) (v1.Layer, error) {
	entries, err := fileEntries(files)
	if err != nil {
		return nil, err
	}
	return layer(entries)
}

// fileEntries are the entries of files (their path in the image to the
// file on this machine, symbolic links followed), after the directories
// they need, parents first.
func fileEntries(files map[string]string) ([]entry, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var entries []entry
	dirs := map[string]bool{}
	for _, n := range names {
		for d := path.Dir(n); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	dirNames := make([]string, 0, len(dirs))
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames) // parents first
	for _, d := range dirNames {
		entries = append(entries, entry{hdr: tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}})
	}
	for _, n := range names {
		data, err := os.ReadFile(files[n])
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{hdr: tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o755}, data: data})
	}
	return entries, nil
}

// busyboxLayer is a small root filesystem: busybox with a link for each of
// its applets, the directories a container expects, and root and nobody.
func busyboxLayer(busybox string) (v1.Layer, error) {
	data, err := os.ReadFile(busybox)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("listing busybox's applets: %w", err)
	}
	dir := func(name string, mode int64) entry {
		return entry{hdr: tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode}}
	}
	file := func(name, content string) entry {
		return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}, data: []byte(content)}
	}
	entries := []entry{
		dir("bin", 0o755), dir("dev", 0o755), dir("etc", 0o755), dir("home", 0o755), dir("proc", 0o755),
		dir("root", 0o700), dir("sbin", 0o755), dir("sys", 0o755), dir("tmp", 0o1777), dir("usr", 0o755),
		dir("usr/bin", 0o755), dir("usr/sbin", 0o755), dir("var", 0o755),
		file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"),
		file("etc/group", "root:x:0:\nnobody:x:65534:\n"),
		{hdr: tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755}, data: data},
	}
	applets := strings.Fields(string(out))
	sort.Strings(applets)
	for _, a := range applets {
		if a == "bin/busybox" {
			continue
		}
		entries = append(entries, entry{hdr: tar.Header{Name: a, Typeflag: tar.TypeSymlink, Linkname: "/bin/busybox", Mode: 0o777}})
	}
	return layer(entries)
}

// serve serves the layout's images, read-only, straight from the layout
// (newLayoutRegistry) until SIGTERM or SIGINT.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	dir := fs.String("layout", "", "the OCI layout that build wrote")
	listen := fs.String("listen", "127.0.0.1:0", "the address to serve at")
	_ = fs.Parse(args)
	if *dir == "" {
		return errors.New("serve: --layout is required")
	}
	images, count, err := newLayoutRegistry(*dir)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", images)
	// Every image is there as soon as the layout is read: ready once
	// serving.
	mux.HandleFunc("/kit/ready", func(http.ResponseWriter, *http.Request) {})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Printf("serving %d images at %s", count, ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}
