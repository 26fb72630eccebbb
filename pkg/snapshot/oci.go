package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

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

// remoteOptions authenticate as the Docker config does (docker login,
// credential helpers), anonymously without one.
func remoteOptions(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
}

// Push pushes the snapshot file to dest (oci://REGISTRY/REPOSITORY:TAG)
// as an OCI artifact, and returns its digest. A push that fails leaves
// no tag: blobs it sent, unreferenced, are the registry's to collect.
func Push(ctx context.Context, file, dest string) (string, error) {
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
	if err := remote.Write(ref, img, remoteOptions(ctx)...); err != nil {
		return "", fmt.Errorf("pushing the snapshot to %s: %w", dest, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return digest.String(), nil
}

// Pull writes the snapshot that source (oci://REGISTRY/REPOSITORY:TAG)
// holds to out, checked against its digest as it is read.
func Pull(ctx context.Context, source string, out io.Writer) error {
	ref, err := reference(source)
	if err != nil {
		return err
	}
	img, err := remote.Image(ref, remoteOptions(ctx)...)
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
