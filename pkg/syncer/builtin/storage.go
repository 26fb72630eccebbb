package builtin

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
)

// PersistentVolumeClaims syncs claims down and their binding status up.
// A tenant cannot pick host volumes: the volume name and the volume
// selector are not synced (they could bind another tenant's volume), and
// neither is a data source in another namespace.
func PersistentVolumeClaims() syncer.Syncer {
	return syncer.Syncer{
		Name:             "persistentvolumeclaims",
		Object:           func() client.Object { return &corev1.PersistentVolumeClaim{} },
		CopyUserMetadata: true,
		Down: func(t, h client.Object) error {
			tenant, host := t.(*corev1.PersistentVolumeClaim), h.(*corev1.PersistentVolumeClaim)
			if host.ResourceVersion == "" {
				host.Spec = *tenant.Spec.DeepCopy()
				pods.OwnVolumesOnly(&host.Spec)
				return nil
			}
			// After creation only the requested size may grow.
			host.Spec.Resources.Requests = tenant.Spec.Resources.Requests
			return nil
		},
		Up: syncer.StatusUp(syncer.CopyStatus(func(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaimStatus {
			return &c.Status
		})),
	}
}
