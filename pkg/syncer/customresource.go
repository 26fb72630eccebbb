package syncer

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CustomResource is a syncer for any namespaced custom resource type, with
// no Go code of its own: everything but metadata and status goes down,
// status comes up. It works on unstructured objects, so the type needs no
// Go struct and no scheme; its syncer starts once the type is served.
func CustomResource(gvk schema.GroupVersionKind) Syncer {
	return Syncer{
		Name: strings.ToLower(gvk.Kind) + "." + gvk.Group,
		Object: func() client.Object {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			return u
		},
		CopyUserMetadata: true,
		Down: func(t, h client.Object) error {
			tenant, host := t.(*unstructured.Unstructured), h.(*unstructured.Unstructured)
			for k := range host.Object {
				if !envelope[k] {
					delete(host.Object, k)
				}
			}
			for k, v := range tenant.Object {
				if !envelope[k] {
					host.Object[k] = runtime.DeepCopyJSONValue(v)
				}
			}
			return nil
		},
		Up: StatusUp(copyUnstructuredStatus),
	}
}

// envelope are the top-level fields that are not the object's content.
var envelope = map[string]bool{"apiVersion": true, "kind": true, "metadata": true, "status": true}

// copyUnstructuredStatus is, for StatusUp, the status copy of custom
// resources: the host's status replaces the tenant's when the host has one
// and the two differ.
func copyUnstructuredStatus(h, t client.Object) bool {
	host, tenant := h.(*unstructured.Unstructured), t.(*unstructured.Unstructured)
	status, found := host.Object["status"]
	if !found || equality.Semantic.DeepEqual(status, tenant.Object["status"]) {
		return false
	}
	tenant.Object["status"] = runtime.DeepCopyJSONValue(status)
	return true
}
