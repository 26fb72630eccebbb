package builtin

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
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
				ownVolumesOnly(&host.Spec)
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

// ownVolumesOnly takes out of a claim what would let a tenant pick a host
// volume, or data, not its own: the volume name, a volume selector, and a
// data source in another namespace. It says what it took out.
func ownVolumesOnly(spec *corev1.PersistentVolumeClaimSpec) (taken []string) {
	if spec.VolumeName != "" {
		spec.VolumeName = ""
		taken = append(taken, "volumeName")
	}
	if spec.Selector != nil {
		spec.Selector = nil
		taken = append(taken, "selector")
	}
	if spec.DataSourceRef != nil && spec.DataSourceRef.Namespace != nil {
		spec.DataSourceRef, spec.DataSource = nil, nil
		taken = append(taken, "dataSourceRef in another namespace")
	}
	return taken
}
