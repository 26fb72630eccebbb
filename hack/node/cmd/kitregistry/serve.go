package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layoutRegistry is a read-only OCI distribution (registry v2) API over an
// OCI image layout on disk. It keeps in memory only what it read at
// start-up: the layout's index and manifests (small, each checked against
// its digest), and which blobs each repository may hand out. It streams
// every blob from its file in the layout, so that its memory does not
// grow with the images it serves.
type layoutRegistry struct {
	// blobs is the layout's blobs/sha256 directory.
	blobs string
	// repos are the repositories, by their path (library/busybox).
	repos map[string]*repository
	// manifests are the bytes of every manifest of the layout that a
	// repository holds, by digest.
	manifests map[v1.Hash][]byte
}

// repository is what one repository of the registry holds.
type repository struct {
	// tags are the manifests of the repository's tags.
	tags map[string]v1.Descriptor
	// manifests are the manifests that the repository's tags name, and,
	// for an index, those that the index names, by digest.
	manifests map[v1.Hash]v1.Descriptor
	// blobs are the config and layers that the repository's manifests
	// name.
	blobs map[v1.Hash]bool
}

// newLayoutRegistry reads the OCI image layout at dir (as build writes
// it) and returns a read-only registry over it, and the number of images
// of its index (one per reference). Each image is served under the
// repository and tag of its annotation org.opencontainers.image.ref.name
// (registry.k8s.io/pause:3.10.2 as pause:3.10.2,
// docker.io/library/busybox:1.37 as library/busybox:1.37).
//
// An entry of the index may be an image manifest or an image index; an
// index is served as a manifest too, with the manifests it names (by
// digest, in the same repository) and their blobs. Every manifest and
// blob that the index names, directly or not, must be in the layout, with
// the size its descriptor gives (and each manifest with its digest): a
// layout that is not whole is refused here, not when a node pulls it. Two
// entries that give one repository's tag different manifests are refused
// too.
func newLayoutRegistry(dir string) (http.Handler, int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the layout %s: %w", dir, err)
	}
	index, err := v1.ParseIndexManifest(bytes.NewReader(data))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the layout %s: index.json: %w", dir, err)
	}
	reg := &layoutRegistry{blobs: filepath.Join(dir, "blobs", "sha256"), repos: map[string]*repository{}, manifests: map[v1.Hash][]byte{}}
	// What the manifests read so far name, so that each is read once
	// whatever number of tags and repositories name it.
	manifests := map[v1.Hash]*manifestBlobs{}
	for _, desc := range index.Manifests {
		ref := desc.Annotations[refAnnotation]
		tag, err := name.NewTag(ref)
		if err != nil {
			return nil, 0, fmt.Errorf("image %q of the layout %s: %w", ref, dir, err)
		}
		repo := reg.repos[tag.RepositoryStr()]
		if repo == nil {
			repo = &repository{tags: map[string]v1.Descriptor{}, manifests: map[v1.Hash]v1.Descriptor{}, blobs: map[v1.Hash]bool{}}
			reg.repos[tag.RepositoryStr()] = repo
		}
		if prev, ok := repo.tags[tag.TagStr()]; ok && prev.Digest != desc.Digest {
			return nil, 0, fmt.Errorf("image %s of the layout %s: its tag names %s and %s too", ref, dir, desc.Digest, prev.Digest)
		}
		repo.tags[tag.TagStr()] = desc
		if err := reg.add(repo, desc, manifests); err != nil {
			return nil, 0, fmt.Errorf("image %s of the layout %s: %w", ref, dir, err)
		}
	}
	return reg, len(index.Manifests), nil
}

// manifestBlobs is what a manifest of the layout names: manifests (an
// index's), and blobs (an image's config and layers).
type manifestBlobs struct {
	manifests []v1.Descriptor
	blobs     []v1.Hash
}

// add gives repo the manifest of desc, every manifest it names, and
// every blob that any of them names, reading each manifest of the layout
// once (seen).
func (reg *layoutRegistry) add(repo *repository, desc v1.Descriptor, seen map[v1.Hash]*manifestBlobs) error {
	if _, ok := repo.manifests[desc.Digest]; ok {
		return nil // and what it names, with it
	}
	m, ok := seen[desc.Digest]
	if !ok {
		raw, names, err := reg.readManifest(desc)
		if err != nil {
			return err
		}
		reg.manifests[desc.Digest] = raw
		m = names
		seen[desc.Digest] = m
	}
	repo.manifests[desc.Digest] = desc
	for _, b := range m.blobs {
		repo.blobs[b] = true
	}
	for _, child := range m.manifests {
		if err := reg.add(repo, child, seen); err != nil {
			return fmt.Errorf("manifest %s of index %s: %w", child.Digest, desc.Digest, err)
		}
	}
	return nil
}

// readManifest reads the manifest of desc from the layout, checks its
// digest and size, and that every blob it names is in the layout with its
// size; it returns the manifest's bytes and what it names.
func (reg *layoutRegistry) readManifest(desc v1.Descriptor) ([]byte, *manifestBlobs, error) {
	fail := func(err error) ([]byte, *manifestBlobs, error) {
		return nil, nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	file, err := reg.blobPath(desc.Digest)
	if err != nil {
		return fail(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return fail(err)
	}
	got, size, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return fail(err)
	}
	if got != desc.Digest || size != desc.Size {
		return fail(fmt.Errorf("the layout's blob is %s, %d bytes, not %d", got, size, desc.Size))
	}
	m := &manifestBlobs{}
	switch desc.MediaType {
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
		manifest, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			return fail(err)
		}
		for _, blob := range append([]v1.Descriptor{manifest.Config}, manifest.Layers...) {
			file, err := reg.blobPath(blob.Digest)
			if err != nil {
				return fail(err)
			}
			info, err := os.Stat(file)
			if err != nil {
				return fail(fmt.Errorf("blob %s: %w", blob.Digest, err))
			}
			if info.Size() != blob.Size {
				return fail(fmt.Errorf("blob %s is %d bytes in the layout, not %d", blob.Digest, info.Size(), blob.Size))
			}
			m.blobs = append(m.blobs, blob.Digest)
		}
	case types.OCIImageIndex, types.DockerManifestList:
		index, err := v1.ParseIndexManifest(bytes.NewReader(raw))
		if err != nil {
			return fail(err)
		}
		m.manifests = index.Manifests
	default:
		return fail(fmt.Errorf("media type %q is neither an image manifest nor an image index", desc.MediaType))
	}
	return raw, m, nil
}

// blobPath is the file of the blob h in the layout; h must be a sha256
// digest, so that the path is within the layout's blobs/sha256.
func (reg *layoutRegistry) blobPath(h v1.Hash) (string, error) {
	if _, err := parseDigest(h.String()); err != nil {
		return "", err
	}
	return filepath.Join(reg.blobs, h.Hex), nil
}

// parseDigest parses s as sha256:<64 lowercase hex digits>, the only
// digests of a layout that this registry serves.
func parseDigest(s string) (v1.Hash, error) {
	h, err := v1.NewHash(s)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("digest %q: %w", s, err)
	}
	if h.Algorithm != "sha256" {
		return v1.Hash{}, fmt.Errorf("digest %q: not sha256", s)
	}
	return h, nil
}

// ServeHTTP answers the registry API's reads: GET /v2/, the manifests and
// blobs of a repository (GET or HEAD), and its tags (GET); it refuses
// every other method with 405.
func (reg *layoutRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read-only: Pods reach this address too, and must not replace an
	// image that other Pods, or the host, pull.
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "the kit's registry is read-only", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	if p == "/v2/" || p == "/v2" {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
		return
	}
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if repoName, ok := strings.CutSuffix(rest, "/tags/list"); ok {
		reg.serveTags(w, repoName)
		return
	}
	for _, route := range []struct {
		sep   string
		serve func(http.ResponseWriter, *http.Request, *repository, string)
	}{{"/manifests/", reg.serveManifest}, {"/blobs/", reg.serveBlob}} {
		i := strings.LastIndex(rest, route.sep)
		if i <= 0 {
			continue
		}
		repoName, ref := rest[:i], rest[i+len(route.sep):]
		repo := reg.repos[repoName]
		if repo == nil {
			registryError(w, http.StatusNotFound, "NAME_UNKNOWN", fmt.Sprintf("repository %q is not in the kit's registry", repoName))
			return
		}
		route.serve(w, r, repo, ref)
		return
	}
	registryError(w, http.StatusNotFound, "UNSUPPORTED", "the kit's registry serves manifests, blobs and tags only")
}

// serveTags answers the list of the tags of repoName, sorted.
func (reg *layoutRegistry) serveTags(w http.ResponseWriter, repoName string) {
	repo := reg.repos[repoName]
	if repo == nil {
		registryError(w, http.StatusNotFound, "NAME_UNKNOWN", fmt.Sprintf("repository %q is not in the kit's registry", repoName))
		return
	}
	body, err := json.Marshal(struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}{repoName, slices.Sorted(maps.Keys(repo.tags))})
	if err != nil {
		registryError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// serveManifest answers the manifest of repo that ref names: a tag of
// repo, or the digest of a manifest that one of its tags names (or that
// an index it tags names), with the descriptor's media type as its
// Content-Type. Its bytes are those read from the layout at start-up,
// checked against the digest.
func (reg *layoutRegistry) serveManifest(w http.ResponseWriter, r *http.Request, repo *repository, ref string) {
	var desc v1.Descriptor
	var ok bool
	if strings.Contains(ref, ":") {
		h, err := parseDigest(ref)
		if err != nil {
			registryError(w, http.StatusBadRequest, "DIGEST_INVALID", err.Error())
			return
		}
		desc, ok = repo.manifests[h]
	} else {
		desc, ok = repo.tags[ref]
	}
	if !ok {
		registryError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", fmt.Sprintf("manifest %q is not in the repository", ref))
		return
	}
	raw := reg.manifests[desc.Digest]
	w.Header().Set("Content-Type", string(desc.MediaType))
	w.Header().Set("Docker-Content-Digest", desc.Digest.String())
	w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(raw)
}

// serveBlob answers the blob digest of repo, a config or layer that one of
// its manifests names, streamed from its file in the layout (with ranges,
// and HEAD).
func (reg *layoutRegistry) serveBlob(w http.ResponseWriter, r *http.Request, repo *repository, digest string) {
	h, err := parseDigest(digest)
	if err != nil {
		registryError(w, http.StatusBadRequest, "DIGEST_INVALID", err.Error())
		return
	}
	if !repo.blobs[h] {
		registryError(w, http.StatusNotFound, "BLOB_UNKNOWN", fmt.Sprintf("blob %s is not in the repository", h))
		return
	}
	file, err := reg.blobPath(h)
	if err != nil {
		registryError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return
	}
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		registryError(w, http.StatusNotFound, "BLOB_UNKNOWN", fmt.Sprintf("blob %s is gone from the layout", h))
		return
	}
	if err != nil {
		log.Printf("blob %s: %v", h, err)
		registryError(w, http.StatusInternalServerError, "UNKNOWN", "opening the blob failed")
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Docker-Content-Digest", h.String())
	w.Header().Set("Etag", `"`+h.String()+`"`)
	// ServeContent streams the file (it never holds the blob in memory),
	// sets Content-Length, answers Range requests, and writes no body to
	// HEAD.
	http.ServeContent(w, r, "", time.Time{}, f)
}

// registryError writes the registry API's error body with code (OCI
// distribution spec: BLOB_UNKNOWN, MANIFEST_UNKNOWN, NAME_UNKNOWN, ...).
func registryError(w http.ResponseWriter, status int, code, message string) {
	body, _ := json.Marshal(map[string][]map[string]string{"errors": {{"code": code, "message": message}}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
