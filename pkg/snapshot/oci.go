package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// An OCI artifact of a snapshot: a manifest whose config says it is one,
// and whose one layer is the snapshot file, byte for byte.
const (
	// OCIScheme prefixes a destination or a source that is an OCI
	// artifact: oci://REGISTRY/REPOSITORY:TAG (or @DIGEST).
	OCIScheme = "oci://"
	// ConfigMediaType is the media type of the artifact's config.
	ConfigMediaType types.MediaType = "application/vnd.tenantry.snapshot.config.v1+json"
	// LayerMediaType is the media type of its layer, the snapshot.
	LayerMediaType types.MediaType = "application/vnd.tenantry.snapshot.v1.tar+gzip"
)

// ErrNotASnapshot is an OCI artifact that is not a Tenantry snapshot.
var ErrNotASnapshot = errors.New("not a Tenantry snapshot")

// IsOCI says whether s names an OCI artifact (OCIScheme).
func IsOCI(s string) bool { return strings.HasPrefix(s, OCIScheme) }

// reference parses oci://REGISTRY/REPOSITORY:TAG. A registry on the
// loopback or a private address is reached over plain HTTP, others over
// HTTPS.
func reference(s string) (name.Reference, error) {
	if !IsOCI(s) {
		return nil, fmt.Errorf("%q is not an OCI reference (%sREGISTRY/REPOSITORY:TAG)", s, OCIScheme)
	}
	ref, err := name.ParseReference(strings.TrimPrefix(s, OCIScheme), name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	return ref, nil
}

// Registry reaches OCI registries with its Keychain's credentials.
type Registry struct {
	// Keychain gives the credentials of a registry; nil: the Docker
	// config's (docker login, credential helpers), anonymous without one.
	Keychain authn.Keychain
}

func (r Registry) options(ctx context.Context) []remote.Option {
	keychain := r.Keychain
	if keychain == nil {
		keychain = authn.DefaultKeychain
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain)}
}

// Push pushes the snapshot file to dest (oci://REGISTRY/REPOSITORY:TAG)
// as an OCI artifact, with the Docker config's credentials, and returns
// its digest. See Registry.Push.
func Push(ctx context.Context, file, dest string) (string, error) {
	return Registry{}.Push(ctx, file, dest)
}

// Pull writes the snapshot that source holds to out, with the Docker
// config's credentials. See Registry.Pull.
func Pull(ctx context.Context, source string, out io.Writer) error {
	return Registry{}.Pull(ctx, source, out)
}

// Push pushes the snapshot file to dest (oci://REGISTRY/REPOSITORY:TAG)
// as an OCI artifact, and returns its digest. A push that fails leaves
// no tag: blobs it sent, unreferenced, are the registry's to collect.
func (r Registry) Push(ctx context.Context, file, dest string) (string, error) {
	ref, err := reference(dest)
	if err != nil {
		return "", err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(file) }, tarball.WithMediaType(LayerMediaType))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", file, err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), ConfigMediaType)
	if img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: LayerMediaType}); err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, r.options(ctx)...); err != nil {
		return "", fmt.Errorf("pushing the snapshot to %s: %w", dest, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return digest.String(), nil
}

// Pull writes the snapshot that source (oci://REGISTRY/REPOSITORY:TAG or
// @DIGEST) holds to out, checked against its digest as it is read.
func (r Registry) Pull(ctx context.Context, source string, out io.Writer) error {
	ref, err := reference(source)
	if err != nil {
		return err
	}
	img, err := remote.Image(ref, r.options(ctx)...)
	if err != nil {
		return fmt.Errorf("reading %s: %w", source, err)
	}
	manifest, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("reading %s: %w", source, err)
	}
	if manifest.Config.MediaType != ConfigMediaType || len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != LayerMediaType {
		return fmt.Errorf("%s: %w: its config is %s, with %d layers", source, ErrNotASnapshot, manifest.Config.MediaType, len(manifest.Layers))
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("reading %s: %w", source, err)
	}
	blob, err := layers[0].Compressed()
	if err != nil {
		return fmt.Errorf("reading %s: %w", source, err)
	}
	defer blob.Close()
	if _, err := io.Copy(out, blob); err != nil {
		return fmt.Errorf("reading %s: %w", source, err)
	}
	return nil
}

// Tag is the tag of cluster's snapshot taken at: NAME-20261129T030000Z.
func Tag(cluster string, at time.Time) string {
	return cluster + "-" + at.UTC().Format(tagTime)
}

const tagTime = "20060102T150405Z"

// Prune deletes cluster's snapshots (by Tag) from repository
// (oci://REGISTRY/REPOSITORY) but the keep newest, and returns the tags
// it deleted. Tags of another cluster, or not a snapshot's, stay.
func (r Registry) Prune(ctx context.Context, repository, cluster string, keep int) ([]string, error) {
	repo, err := name.NewRepository(strings.TrimPrefix(repository, OCIScheme), name.StrictValidation)
	if err != nil || !IsOCI(repository) {
		return nil, fmt.Errorf("%q is not an OCI repository (%sREGISTRY/REPOSITORY): %v", repository, OCIScheme, err)
	}
	tags, err := remote.List(repo, r.options(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("listing the tags of %s: %w", repository, err)
	}
	var mine []string
	for _, tag := range tags {
		if at, ok := strings.CutPrefix(tag, cluster+"-"); ok {
			if _, err := time.Parse(tagTime, at); err == nil {
				mine = append(mine, tag)
			}
		}
	}
	// The time sorts as the string does.
	slices.Sort(mine)
	if len(mine) <= keep {
		return nil, nil
	}
	old := mine[:len(mine)-keep]
	for i, tag := range old {
		// By digest: registries delete manifests, not tags.
		desc, err := remote.Head(repo.Tag(tag), r.options(ctx)...)
		if err != nil {
			return old[:i], fmt.Errorf("reading %s:%s: %w", repository, tag, err)
		}
		if err := remote.Delete(repo.Digest(desc.Digest.String()), r.options(ctx)...); err != nil {
			return old[:i], fmt.Errorf("deleting %s:%s: %w", repository, tag, err)
		}
		// A registry that keeps a tag apart from its manifest lets it go
		// too; one that refuses deletes by tag has let it go with the
		// manifest.
		_ = remote.Delete(repo.Tag(tag), r.options(ctx)...)
	}
	return old, nil
}
