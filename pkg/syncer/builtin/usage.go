package builtin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// What the built-in types' copies take of a tenant's budget
// (syncer.Syncer.Usage), by ResourceQuota's object count names.

var one = *resource.NewQuantity(1, resource.DecimalSI)

// countedAs is the Usage of a type whose copies each take one of name.
func countedAs(name corev1.ResourceName) func(context.Context, client.Object, syncer.UsageInput) (corev1.ResourceList, error) {
	return func(context.Context, client.Object, syncer.UsageInput) (corev1.ResourceList, error) {
		return corev1.ResourceList{name: one}, nil
	}
}

// serviceUsage: a Service, and its node ports and load balancer.
func serviceUsage(_ context.Context, obj client.Object, _ syncer.UsageInput) (corev1.ResourceList, error) {
	svc := obj.(*corev1.Service)
	out := corev1.ResourceList{corev1.ResourceServices: one}
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		out[corev1.ResourceServicesLoadBalancers] = one
		fallthrough
	case corev1.ServiceTypeNodePort:
		out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(int64(len(svc.Spec.Ports)), resource.DecimalSI)
	}
	return out, nil
}

// claimUsage: a PersistentVolumeClaim, and the storage it requests.
func claimUsage(_ context.Context, obj client.Object, _ syncer.UsageInput) (corev1.ResourceList, error) {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	out := corev1.ResourceList{corev1.ResourcePersistentVolumeClaims: one}
	if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		out[corev1.ResourceRequestsStorage] = q
	}
	return out, nil
}
