package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
)

// identityKeys are the keys of the control plane's PKI Secret that a
// snapshot keeps: its CA, its front proxy's CA and its service account
// keys. A tenant restored with them is the same cluster to its clients:
// their kubeconfigs, its service account tokens (in its Secrets, in its
// Pods) and its aggregated APIs still trust it. Every other certificate
// is issued again from them.
var identityKeys = []string{
	controlplane.KeyCACert, controlplane.KeyCAKey,
	controlplane.KeyFrontProxyCACert, controlplane.KeyFrontProxyCAKey,
	controlplane.KeyServiceAccountPrivate, controlplane.KeyServiceAccountPublic,
}

// Taken is what OfVirtualCluster wrote.
type Taken struct {
	Manifest Manifest
	// Size is the snapshot's size in bytes, compressed.
	Size int64
}

// OfVirtualCluster writes a snapshot of vc, whose control plane Tenantry
// runs, to out, through the host (its config, and c): its storage's keys
// at one revision, read while it runs, its spec, its version and its
// identity (see identityKeys). dir holds the keys meanwhile ("" for the
// system's temporary directory).
func OfVirtualCluster(ctx context.Context, host *rest.Config, c client.Reader, vc *tenantryv1alpha1.VirtualCluster, out io.Writer, dir string) (Taken, error) {
	if vc.Spec.ControlPlane == nil {
		return Taken{}, fmt.Errorf("VirtualCluster %s: %w", vc.Name, controlplane.ErrNotProvisioned)
	}
	began := time.Now()
	var pkiSecret corev1.Secret
	key := client.ObjectKey{Namespace: controlplane.Namespace(vc.Name), Name: controlplane.PKISecretName}
	if err := c.Get(ctx, key, &pkiSecret); err != nil {
		return Taken{}, fmt.Errorf("VirtualCluster %s: reading its control plane's certificates (Secret %s): %w", vc.Name, key, err)
	}
	identity := map[string][]byte{}
	for _, k := range identityKeys {
		v, ok := pkiSecret.Data[k]
		if !ok {
			return Taken{}, fmt.Errorf("VirtualCluster %s: its control plane's certificates (Secret %s) have no %s", vc.Name, key, k)
		}
		identity[k] = v
	}
	spec, err := json.Marshal(vc.Spec)
	if err != nil {
		return Taken{}, err
	}
	version := vc.Spec.ControlPlane.Version
	if s := vc.Status.ControlPlane; s != nil && s.Version != "" {
		version = s.Version
	}

	storage, err := controlplane.OpenStorage(ctx, host, c, vc)
	if err != nil {
		return Taken{}, err
	}
	defer storage.Close()
	w, err := NewWriter(dir)
	if err != nil {
		return Taken{}, err
	}
	defer w.Close()
	revision, err := Take(ctx, storage.Client, storage.Prefix, w.Add)
	if err != nil {
		return Taken{}, fmt.Errorf("VirtualCluster %s: %w", vc.Name, err)
	}
	if w.keys == 0 {
		return Taken{}, fmt.Errorf("VirtualCluster %s: %w %q of its %s storage", vc.Name, errNoKeys, storage.Prefix, storage.Type)
	}
	m := Manifest{
		Cluster: vc.Name, KubernetesVersion: version, Storage: string(storage.Type), Revision: revision,
		TakenAt: began.UTC(), Took: time.Since(began).Round(time.Millisecond).String(), Spec: spec, PKI: identity,
	}
	m, size, err := w.Write(out, m)
	if err != nil {
		return Taken{}, fmt.Errorf("VirtualCluster %s: %w", vc.Name, err)
	}
	return Taken{Manifest: m, Size: size}, nil
}

// errNoKeys is a storage with nothing of the tenant's: not the tenant's
// storage, or not yet written.
var errNoKeys = errors.New("no key under the tenant's prefix")
