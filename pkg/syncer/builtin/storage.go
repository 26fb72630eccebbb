package builtin

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
)

// PersistentVolumeClaims syncs claims down and their binding status up.
// A tenant cannot pick host volumes: the volume name and the volume
// selector are not synced (they could bind another tenant's volume), and
// neither is a data source in another namespace; a claim that names a
// StorageClass (the empty one included) or a VolumeAttributesClass that
// policy does not allow is refused.
func PersistentVolumeClaims(policy pods.StoragePolicy) syncer.Syncer {
	return syncer.Syncer{
		Name:             "persistentvolumeclaims",
		Usage:            claimUsage,
		Object:           func() client.Object { return &corev1.PersistentVolumeClaim{} },
		CopyUserMetadata: true,
		Down: func(t, h client.Object) error {
			tenant, host := t.(*corev1.PersistentVolumeClaim), h.(*corev1.PersistentVolumeClaim)
			if host.ResourceVersion == "" {
				if err := policy.Check("the claim", &tenant.Spec); err != nil {
					return err
				}
				host.Spec = *tenant.Spec.DeepCopy()
				pods.OwnVolumesOnly(&host.Spec)
				return nil
			}
			// After creation only the requested size may grow.
			host.Spec.Resources.Requests = tenant.Spec.Resources.Requests
			return nil
		},
		Stripped: func(t client.Object) string {
			taken := pods.OwnVolumesOnly(t.(*corev1.PersistentVolumeClaim).Spec.DeepCopy())
			if len(taken) == 0 {
				return ""
			}
			return strings.Join(taken, ", ") + " (a tenant cannot pick a host volume)"
		},
		Up: syncer.StatusUp(syncer.CopyStatus(func(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaimStatus {
			return &c.Status
		})),
	}
}
