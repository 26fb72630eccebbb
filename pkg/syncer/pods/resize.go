package pods

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// resizeExtension resizes a tenant Pod's host copy in place when the
// tenant resizes the Pod (its pods/resize subresource, the only way a
// running Pod's container resources change): the host's kubelet acts on
// it, and the Pod's status (its resize conditions, each container's
// allocated and actual resources) comes up as any status does.
type resizeExtension struct{}

// Setup runs the resize controller of the tenant's Pods.
func (resizeExtension) Setup(scope *syncer.TenantScope) error {
	mgr := scope.Manager()
	r := &resizer{scope: scope, tenant: mgr.GetClient(), recorder: mgr.GetEventRecorder("tenantry-syncer")}
	hostPod := func(o client.Object) (types.NamespacedName, bool) { return scope.TenantKey(o) }
	return scope.RunController("pod-resize", 1, r,
		scope.TenantObjects(&corev1.Pod{}, predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false }, // created at its size
			UpdateFunc: func(e event.UpdateEvent) bool {
				return !equality.Semantic.DeepEqual(containerResources(e.ObjectOld.(*corev1.Pod)), containerResources(e.ObjectNew.(*corev1.Pod)))
			},
		}),
		// A host Pod that comes to run (or is changed back) is looked at
		// again: a resize asked for before it existed.
		scope.HostEvents(&corev1.Pod{}, hostPod))
}

// resizer is the resize controller of one tenant's Pods.
type resizer struct {
	scope    *syncer.TenantScope
	tenant   client.Client
	recorder events.EventRecorder
}

func (r *resizer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tenant, host, ok, err := livePair(ctx, r.scope, r.tenant, req.NamespacedName)
	if !ok {
		return reconcile.Result{}, err
	}
	resized, changed := resizedHost(tenant, host)
	if !changed {
		return reconcile.Result{}, nil
	}
	if err := r.scope.HostClient().SubResource("resize").Update(ctx, resized); err != nil {
		if why, after := r.scope.Transient(err); why != "" {
			ctrl.LoggerFrom(ctx).V(1).Info("retrying the Pod's resize: "+why, "error", err.Error())
			return reconcile.Result{RequeueAfter: after}, nil
		}
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			// The host's word on this size; the tenant's next resize is
			// tried anew.
			r.recorder.Eventf(tenant, nil, corev1.EventTypeWarning, syncer.ReasonHostRejected, "Resize", "the host refused the resize: %s", err)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("resizing the host copy of Pod %s: %w", req.NamespacedName, err)
	}
	r.scope.CountWrite("pods/resize", "down", "update")
	ctrl.LoggerFrom(ctx).V(1).Info("resized the host Pod", "pod", req.NamespacedName)
	return reconcile.Result{}, nil
}

// containerResources are the resources of pod's containers and init
// containers, by name.
func containerResources(pod *corev1.Pod) map[string]corev1.ResourceRequirements {
	out := map[string]corev1.ResourceRequirements{}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			out[c.Name] = c.Resources
		}
	}
	return out
}

// resizedHost is host with the requests and limits that tenant's
// containers state put over its own, and whether that changes any: what
// the host gave a container beside them (a LimitRange's defaults) stays.
func resizedHost(tenant, host *corev1.Pod) (*corev1.Pod, bool) {
	wanted := containerResources(tenant)
	out := host.DeepCopy()
	changed := false
	for _, list := range [][]corev1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		for i := range list {
			t, ok := wanted[list[i].Name]
			if !ok {
				continue
			}
			requests, limits := overlay(list[i].Resources.Requests, t.Requests), overlay(list[i].Resources.Limits, t.Limits)
			if !equality.Semantic.DeepEqual(requests, list[i].Resources.Requests) || !equality.Semantic.DeepEqual(limits, list[i].Resources.Limits) {
				list[i].Resources.Requests, list[i].Resources.Limits = requests, limits
				changed = true
			}
		}
	}
	return out, changed
}

// overlay is base with over's quantities put over it.
func overlay(base, over corev1.ResourceList) corev1.ResourceList {
	if len(over) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = corev1.ResourceList{}
	}
	for name, q := range over {
		out[name] = q
	}
	return out
}

// livePair reads tenant Pod key and its host copy: ok only if both live
// (neither deleted, the host Pod not ended) and the host Pod is the copy
// of that very tenant Pod. An extension that acts on a running host Pod
// for its tenant starts from it.
func livePair(ctx context.Context, scope *syncer.TenantScope, tenantClient client.Reader, key types.NamespacedName) (tenant, host *corev1.Pod, ok bool, err error) {
	if scope.Excluded(key.Namespace) {
		return nil, nil, false, nil
	}
	tenant, host = &corev1.Pod{}, &corev1.Pod{}
	if err := tenantClient.Get(ctx, key, tenant); err != nil {
		return nil, nil, false, client.IgnoreNotFound(err)
	}
	if err := scope.HostReader().Get(ctx, scope.HostKey(key), host); err != nil {
		return nil, nil, false, client.IgnoreNotFound(err)
	}
	if host.Annotations[syncer.AnnotationTenantUID] != string(tenant.UID) || !host.DeletionTimestamp.IsZero() ||
		ended(host) || !tenant.DeletionTimestamp.IsZero() {
		return nil, nil, false, nil
	}
	return tenant, host, true, nil
}
