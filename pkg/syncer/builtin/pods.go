package builtin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// Pods syncs Pods down to run on the host, and brings where and how they
// run back up: the node (through a binding, as a scheduler would) and the
// status, with the Pod's IP. Tenant deletion is mirrored with the tenant's
// grace period, and completed in the tenant once the host Pod is gone, since
// a tenant has no kubelet to do it.
//
// A host Pod can only reach its own host namespace: every object a Pod spec
// names (ConfigMaps, Secrets, ServiceAccounts, claims, pull secrets) is
// looked up in the namespace of the Pod, which holds only this tenant
// namespace's copies. It gets no token: service account tokens are not
// mounted, and projected token volumes are dropped, since in the host they
// would carry the host's credentials.
func Pods() syncer.Syncer {
	return syncer.Syncer{
		Name:             "pods",
		Object:           func() client.Object { return &corev1.Pod{} },
		CopyUserMetadata: true,
		Down: func(t, h client.Object) error {
			tenant, host := t.(*corev1.Pod), h.(*corev1.Pod)
			if host.ResourceVersion == "" {
				host.Spec = podSpecDown(tenant.Spec)
				return nil
			}
			// A Pod's spec is immutable but for images and the deadline.
			syncImages(tenant.Spec.Containers, host.Spec.Containers)
			syncImages(tenant.Spec.InitContainers, host.Spec.InitContainers)
			host.Spec.ActiveDeadlineSeconds = tenant.Spec.ActiveDeadlineSeconds
			return nil
		},
		Up:           podUp,
		FinishDelete: finishPodDelete,
	}
}

// podSpecDown is the host Pod spec for a tenant Pod spec.
func podSpecDown(tenant corev1.PodSpec) corev1.PodSpec {
	spec := *tenant.DeepCopy()
	spec.NodeName = "" // the host schedules
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.DeprecatedServiceAccount = spec.ServiceAccountName
	spec.EphemeralContainers = nil

	dropped := map[string]bool{}
	volumes := spec.Volumes[:0]
	for _, v := range spec.Volumes {
		if v.Projected != nil {
			sources := v.Projected.Sources[:0]
			for _, s := range v.Projected.Sources {
				if s.ServiceAccountToken == nil {
					sources = append(sources, s)
				}
			}
			v.Projected.Sources = sources
			if len(sources) == 0 {
				dropped[v.Name] = true
				continue
			}
		}
		volumes = append(volumes, v)
	}
	spec.Volumes = volumes
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			mounts := cs[i].VolumeMounts[:0]
			for _, m := range cs[i].VolumeMounts {
				if !dropped[m.Name] {
					mounts = append(mounts, m)
				}
			}
			cs[i].VolumeMounts = mounts
		}
	}
	return spec
}

func syncImages(tenant, host []corev1.Container) {
	for i := range host {
		for _, t := range tenant {
			if t.Name == host[i].Name {
				host[i].Image = t.Image
			}
		}
	}
}

// podUp binds the tenant Pod to the host Pod's node, then, in a later sync,
// copies the status.
func podUp(ctx context.Context, c client.Client, h, t client.Object) (bool, error) {
	host, tenant := h.(*corev1.Pod), t.(*corev1.Pod)
	if host.Spec.NodeName != "" && tenant.Spec.NodeName == "" {
		binding := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenant.Namespace, Name: tenant.Name, UID: tenant.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: host.Spec.NodeName},
		}
		if err := c.SubResource("binding").Create(ctx, tenant, binding); err != nil {
			return false, fmt.Errorf("binding tenant Pod to node %s: %w", host.Spec.NodeName, err)
		}
		return true, nil // the binding changes the tenant Pod: its event brings the status
	}
	return copyPodStatus(ctx, c, h, t)
}

var copyPodStatus = syncer.StatusUp(syncer.CopyStatus(func(p *corev1.Pod) *corev1.PodStatus { return &p.Status }))

// finishPodDelete removes a terminating tenant Pod once its host Pod is
// gone: the tenant's kubelet would, but a tenant has none.
func finishPodDelete(ctx context.Context, c client.Client, t client.Object) error {
	return c.Delete(ctx, t, client.GracePeriodSeconds(0), client.Preconditions{UID: ptr.To(t.GetUID())})
}
