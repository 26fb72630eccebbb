package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// testLayout is an OCI layout as build writes one: image a (two layers)
// as pause:3.10.2 and pause:3.9, image b (one layer) as library/busybox,
// and an image index of two images as multi:1.
type testLayout struct {
	dir   string
	a, b  v1.Image
	index v1.ImageIndex
}

func writeTestLayout(t *testing.T) testLayout {
	t.Helper()
	l := testLayout{dir: t.TempDir()}
	var err error
	if l.a, err = random.Image(1024, 2); err != nil {
		t.Fatal(err)
	}
	if l.b, err = random.Image(4096, 1); err != nil {
		t.Fatal(err)
	}
	if l.index, err = random.Index(512, 1, 2); err != nil {
		t.Fatal(err)
	}
	lp, err := layout.Write(l.dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range []struct {
		img v1.Image
		ref string
	}{{l.a, "registry.k8s.io/pause:3.10.2"}, {l.a, "registry.k8s.io/pause:3.9"}, {l.b, "docker.io/library/busybox:1.37"}} {
		if err := lp.AppendImage(im.img, layout.WithAnnotations(map[string]string{refAnnotation: im.ref})); err != nil {
			t.Fatal(err)
		}
	}
	if err := lp.AppendIndex(l.index, layout.WithAnnotations(map[string]string{refAnnotation: "registry.k8s.io/multi:1"})); err != nil {
		t.Fatal(err)
	}
	return l
}

// serveTestLayout serves l with newLayoutRegistry, and returns the
// handler and its host.
func serveTestLayout(t *testing.T, l testLayout) (http.Handler, string) {
	t.Helper()
	handler, count, err := newLayoutRegistry(l.dir)
	if err != nil {
		t.Fatal(err)
	}
	if count != 4 {
		t.Errorf("newLayoutRegistry counts %d images, want the index's 4", count)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return handler, strings.TrimPrefix(srv.URL, "http://")
}

// head is the response of handler to HEAD path, as the handler wrote it
// (a server would drop a body).
func head(handler http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, path, nil))
	return rec
}

func digestOf(t *testing.T, d interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// layoutBlob is the blob h's bytes in the layout at dir.
func layoutBlob(t *testing.T, dir string, h v1.Hash) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "blobs", h.Algorithm, h.Hex))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// checkPulled pulls ref from host and checks that it is the image want,
// its config and each of its layers the layout's bytes.
func checkPulled(t *testing.T, dir, host, ref string, want v1.Image) {
	t.Helper()
	tag, err := name.ParseReference(host+"/"+ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(tag)
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	if got, want := digestOf(t, img), digestOf(t, want); got != want {
		t.Errorf("%s is %s, want %s", ref, got, want)
	}
	config, err := img.RawConfigFile()
	if err != nil {
		t.Fatalf("%s's config: %v", ref, err)
	}
	configName, err := want.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(config, layoutBlob(t, dir, configName)) {
		t.Errorf("%s's config is not the layout's", ref)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	wantLayers, err := want.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != len(wantLayers) {
		t.Fatalf("%s has %d layers, want %d", ref, len(layers), len(wantLayers))
	}
	for i, layer := range layers {
		rc, err := layer.Compressed()
		if err != nil {
			t.Fatalf("%s's layer %d: %v", ref, i, err)
		}
		got, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			t.Fatalf("%s's layer %d: %v", ref, i, err)
		}
		if want := layoutBlob(t, dir, digestOf(t, wantLayers[i])); !bytes.Equal(got, want) {
			t.Errorf("%s's layer %d is %d bytes, not the layout's %d", ref, i, len(got), len(want))
		}
	}
}

// do sends method to url (with its path sent as it is escaped) and
// returns the response, its body read.
func do(t *testing.T, method, url string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// wantError checks that resp is status with the registry's error code.
func wantError(t *testing.T, what string, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("%s: status %d, want %d (%.200q)", what, resp.StatusCode, status, body)
		return
	}
	var errs struct {
		Errors []struct{ Code string } `json:"errors"`
	}
	if err := json.Unmarshal(body, &errs); err != nil || len(errs.Errors) != 1 || errs.Errors[0].Code != code {
		t.Errorf("%s: body %.200q, want the error %s", what, body, code)
	}
}

func TestServeLayout(t *testing.T) {
	l := writeTestLayout(t)
	handler, host := serveTestLayout(t, l)
	base := "http://" + host

	t.Run("pull", func(t *testing.T) {
		checkPulled(t, l.dir, host, "pause:3.10.2", l.a)
		checkPulled(t, l.dir, host, "pause:3.9", l.a)
		checkPulled(t, l.dir, host, "library/busybox:1.37", l.b)
		checkPulled(t, l.dir, host, "pause@"+digestOf(t, l.a).String(), l.a)
	})

	t.Run("index", func(t *testing.T) {
		ref, err := name.NewTag(host+"/multi:1", name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		index, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("pulling the index: %v", err)
		}
		if got, want := digestOf(t, index), digestOf(t, l.index); got != want {
			t.Errorf("the index is %s, want %s", got, want)
		}
		manifest, err := l.index.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, child := range manifest.Manifests {
			want, err := l.index.Image(child.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkPulled(t, l.dir, host, "multi@"+child.Digest.String(), want)
			resp, body := do(t, http.MethodGet, base+"/v2/pause/manifests/"+child.Digest.String(), nil)
			wantError(t, "an image of multi's index under pause", resp, body, http.StatusNotFound, "MANIFEST_UNKNOWN")
		}
	})

	t.Run("head manifest", func(t *testing.T) {
		resp := head(handler, "/v2/library/busybox/manifests/1.37")
		raw, err := l.b.RawManifest()
		if err != nil {
			t.Fatal(err)
		}
		mediaType, err := l.b.MediaType()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Code != http.StatusOK || resp.Body.Len() != 0 {
			t.Errorf("HEAD: status %d, %d bytes of body; want 200 and none", resp.Code, resp.Body.Len())
		}
		if got, want := resp.Header().Get("Docker-Content-Digest"), digestOf(t, l.b).String(); got != want {
			t.Errorf("HEAD: Docker-Content-Digest %q, want %q", got, want)
		}
		if got, want := resp.Header().Get("Content-Type"), string(mediaType); got != want {
			t.Errorf("HEAD: Content-Type %q, want %q", got, want)
		}
		if got, want := resp.Header().Get("Content-Length"), strconv.Itoa(len(raw)); got != want {
			t.Errorf("HEAD: Content-Length %q, want %q", got, want)
		}
	})

	t.Run("blobs of another repository", func(t *testing.T) {
		layers, err := l.a.Layers()
		if err != nil {
			t.Fatal(err)
		}
		config, err := l.a.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []v1.Hash{digestOf(t, layers[0]), config} {
			resp, body := do(t, http.MethodGet, base+"/v2/library/busybox/blobs/"+h.String(), nil)
			wantError(t, "pause's blob under library/busybox", resp, body, http.StatusNotFound, "BLOB_UNKNOWN")
			rec := head(handler, "/v2/pause/blobs/"+h.String())
			if rec.Code != http.StatusOK || rec.Header().Get("Docker-Content-Digest") != h.String() || rec.Body.Len() != 0 {
				t.Errorf("HEAD of pause's blob: status %d, digest %q, %d bytes of body; want 200, %s, none", rec.Code, rec.Header().Get("Docker-Content-Digest"), rec.Body.Len(), h)
			}
			if got, want := rec.Header().Get("Content-Length"), strconv.Itoa(len(layoutBlob(t, l.dir, h))); got != want {
				t.Errorf("HEAD of pause's blob: Content-Length %q, want %q", got, want)
			}
		}
	})

	t.Run("range", func(t *testing.T) {
		layers, err := l.b.Layers()
		if err != nil {
			t.Fatal(err)
		}
		h := digestOf(t, layers[0])
		resp, body := do(t, http.MethodGet, base+"/v2/library/busybox/blobs/"+h.String(), http.Header{"Range": {"bytes=10-19"}})
		if want := layoutBlob(t, l.dir, h)[10:20]; resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, want) {
			t.Errorf("a range of a blob: status %d, %q; want 206, %q", resp.StatusCode, body, want)
		}
	})

	t.Run("unknown", func(t *testing.T) {
		resp, body := do(t, http.MethodGet, base+"/v2/pause/manifests/3.11", nil)
		wantError(t, "an unknown tag", resp, body, http.StatusNotFound, "MANIFEST_UNKNOWN")
		resp, body = do(t, http.MethodGet, base+"/v2/library/busybox/manifests/3.10.2", nil)
		wantError(t, "pause's tag under library/busybox", resp, body, http.StatusNotFound, "MANIFEST_UNKNOWN")
		resp, body = do(t, http.MethodGet, base+"/v2/library/busybox/manifests/"+digestOf(t, l.a).String(), nil)
		wantError(t, "pause's digest under library/busybox", resp, body, http.StatusNotFound, "MANIFEST_UNKNOWN")
		resp, body = do(t, http.MethodGet, base+"/v2/busybox/manifests/1.37", nil)
		wantError(t, "an unknown repository", resp, body, http.StatusNotFound, "NAME_UNKNOWN")
		resp, body = do(t, http.MethodGet, base+"/v2/busybox/blobs/"+digestOf(t, l.a).String(), nil)
		wantError(t, "a blob of an unknown repository", resp, body, http.StatusNotFound, "NAME_UNKNOWN")
	})

	t.Run("bad digests", func(t *testing.T) {
		// A file that a digest taken for a path would name, from
		// blobs/sha256.
		secret := "not a blob of the registry"
		if err := os.WriteFile(filepath.Join(l.dir, "secret"), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, digest := range []string{"sha256:..%2F..%2Fsecret", "sha256:" + strings.Repeat("A", 64), "sha512:" + strings.Repeat("a", 128), "sha256:abc"} {
			for _, kind := range []string{"blobs", "manifests"} {
				resp, body := do(t, http.MethodGet, base+"/v2/pause/"+kind+"/"+digest, nil)
				wantError(t, kind+" "+digest, resp, body, http.StatusBadRequest, "DIGEST_INVALID")
				if bytes.Contains(body, []byte(secret)) {
					t.Errorf("%s %s: the body holds the file outside blobs/sha256", kind, digest)
				}
			}
		}
	})

	t.Run("read-only", func(t *testing.T) {
		for _, method := range []string{http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodPatch} {
			for _, path := range []string{"/v2/", "/v2/pause/manifests/3.10.2", "/v2/pause/blobs/uploads/", "/v2/pause/blobs/" + digestOf(t, l.a).String()} {
				resp, body := do(t, method, base+path, nil)
				if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(string(body), "the kit's registry is read-only") {
					t.Errorf("%s %s: status %d, %q; want 405, read-only", method, path, resp.StatusCode, body)
				}
			}
		}
		// And the image is still there.
		checkPulled(t, l.dir, host, "pause:3.10.2", l.a)
	})

	t.Run("v2", func(t *testing.T) {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			resp, _ := do(t, method, base+"/v2/", nil)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Distribution-API-Version") != "registry/2.0" {
				t.Errorf("%s /v2/: status %d, Docker-Distribution-API-Version %q; want 200, registry/2.0",
					method, resp.StatusCode, resp.Header.Get("Docker-Distribution-API-Version"))
			}
		}
	})

	t.Run("tags", func(t *testing.T) {
		for repo, want := range map[string][]string{"pause": {"3.10.2", "3.9"}, "library/busybox": {"1.37"}, "multi": {"1"}} {
			resp, body := do(t, http.MethodGet, base+"/v2/"+repo+"/tags/list", nil)
			var list struct {
				Name string   `json:"name"`
				Tags []string `json:"tags"`
			}
			if err := json.Unmarshal(body, &list); resp.StatusCode != http.StatusOK || err != nil {
				t.Fatalf("tags of %s: status %d, %s (%v)", repo, resp.StatusCode, body, err)
			}
			if list.Name != repo || !slices.Equal(list.Tags, want) {
				t.Errorf("tags of %s: %s, want name %s, tags %q", repo, body, repo, want)
			}
			r, err := name.NewRepository(host+"/"+repo, name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			if tags, err := remote.List(r); err != nil || !slices.Equal(tags, want) {
				t.Errorf("remote.List(%s): %q, %v; want %q", repo, tags, err, want)
			}
		}
		resp, body := do(t, http.MethodGet, base+"/v2/busybox/tags/list", nil)
		wantError(t, "tags of an unknown repository", resp, body, http.StatusNotFound, "NAME_UNKNOWN")
	})
}

// A layout that is not whole, or that tags two images alike, is refused
// at start-up.
func TestServeLayoutRefused(t *testing.T) {
	t.Run("missing blob", func(t *testing.T) {
		l := writeTestLayout(t)
		layers, err := l.b.Layers()
		if err != nil {
			t.Fatal(err)
		}
		h := digestOf(t, layers[0])
		if err := os.Remove(filepath.Join(l.dir, "blobs", "sha256", h.Hex)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := newLayoutRegistry(l.dir); err == nil || !strings.Contains(err.Error(), h.String()) {
			t.Errorf("newLayoutRegistry of a layout without %s: %v, want an error naming it", h, err)
		}
	})
	t.Run("changed manifest", func(t *testing.T) {
		l := writeTestLayout(t)
		h := digestOf(t, l.a)
		// b's manifest, whole, under a's digest.
		raw, err := l.b.RawManifest()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(l.dir, "blobs", "sha256", h.Hex), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := newLayoutRegistry(l.dir); err == nil || !strings.Contains(err.Error(), h.String()) {
			t.Errorf("newLayoutRegistry of a layout whose manifest %s is not its digest's: %v, want an error naming it", h, err)
		}
	})
	t.Run("one tag, two images", func(t *testing.T) {
		l := writeTestLayout(t)
		lp, err := layout.FromPath(l.dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := lp.AppendImage(l.b, layout.WithAnnotations(map[string]string{refAnnotation: "registry.k8s.io/pause:3.9"})); err != nil {
			t.Fatal(err)
		}
		if _, _, err := newLayoutRegistry(l.dir); err == nil || !strings.Contains(err.Error(), "registry.k8s.io/pause:3.9") {
			t.Errorf("newLayoutRegistry of a layout with pause:3.9 twice: %v, want an error naming it", err)
		}
	})
	t.Run("no layout", func(t *testing.T) {
		if _, _, err := newLayoutRegistry(t.TempDir()); err == nil {
			t.Error("newLayoutRegistry of an empty directory: no error")
		}
	})
}
