package virtualcluster

import (
	"crypto/sha256"
	"encoding/json"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// respawnInputs is what of spec a tenant's app is built from, encoded: all
// of it but the fields that the reconciler acts on without re-spawning,
// listed here. A field added to the spec re-spawns the tenant when it
// changes unless it is added to this list: the tenant's app, which reads
// the VirtualCluster as it starts, never runs on a spec older than the
// one it is told it runs.
func respawnInputs(spec tenantryv1alpha1.VirtualClusterSpec) ([]byte, error) {
	// paused stops the app rather than re-spawning it; the Secret that
	// kubeconfigSecretRef names is digested by its data (kubeconfigIdentity).
	spec.Paused = false
	spec.KubeconfigSecretRef = tenantryv1alpha1.SecretKeyReference{}
	// spec.controlPlane is the control plane controller's: the tenant's
	// app reads none of it, and rides out a version change as any restart
	// of its API server.
	spec.ControlPlane = nil
	// spec.snapshots is the snapshot controller's, spec.sleep the sleep
	// controller's and the control plane controller's.
	spec.Snapshots = nil
	spec.Sleep = nil
	return json.Marshal(spec)
}

func (r *Reconciler) digest(name string) [sha256.Size]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.digests[name]
}

func (r *Reconciler) setDigest(name string, d [sha256.Size]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.digests == nil {
		r.digests = map[string][sha256.Size]byte{}
	}
	if d == ([sha256.Size]byte{}) {
		delete(r.digests, name)
		return
	}
	r.digests[name] = d
}
