package pods

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// IPIndex indexes a hub's host Pods by the IPs of those that have not
// ended (an ended Pod's IPs may be another's by now). Give it to the hub
// (syncer.HubOptions.Indexes) for Addresses.
var IPIndex = syncer.HubIndex{Object: &corev1.Pod{}, Name: "tenantry.dev/pod-ip", Values: ipsOf}

func ipsOf(o client.Object) []string {
	pod := o.(*corev1.Pod)
	if ended(pod) {
		return nil
	}
	ips := make([]string, 0, len(pod.Status.PodIPs))
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	return ips
}

func ended(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// Addresses tells whose host Pod an IP is, from the cache of a hub built
// with IPIndex: the answers of the tenant DNS server and the kubelet API
// listener, which serve every tenant from the hub's one Pod informer.
type Addresses struct {
	Hub *syncer.Hub
}

// at are the host Pods of IP ip in the hub's cache; none when no tenant
// syncs Pods.
func (a Addresses) at(ctx context.Context, ip string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if _, err := a.Hub.ListBy(ctx, &pods, IPIndex.Name, ip); err != nil {
		return nil, fmt.Errorf("looking up the host Pod of IP %s: %w", ip, err)
	}
	return pods.Items, nil
}

// TenantPodAt says whether ip is the address of a tenant's host Pod, and
// whose: unlike PodCluster, a Pod being deleted counts (it keeps its
// address until it ends, as long as its grace period lasts), and an
// address that Pods of two tenants claim counts too (the first found is
// named). Host Pods with host networking are not counted.
func (a Addresses) TenantPodAt(ctx context.Context, ip string) (cluster string, ok bool, err error) {
	pods, err := a.at(ctx, ip)
	if err != nil {
		return "", false, err
	}
	for _, p := range pods {
		if c := p.Labels[syncer.LabelCluster]; c != "" && !p.Spec.HostNetwork && !ended(&p) {
			return c, true, nil
		}
	}
	return "", false, nil
}

// claimants are the host Pods of a tenant that hold IP ip and are not
// being deleted, without those with host networking.
func (a Addresses) claimants(ctx context.Context, ip string) ([]corev1.Pod, error) {
	pods, err := a.at(ctx, ip)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pods, func(p corev1.Pod) bool {
		return p.Spec.HostNetwork || !p.DeletionTimestamp.IsZero() || p.Labels[syncer.LabelCluster] == ""
	}), nil
}

// PodAt says which tenant Pod the running host Pod of IP ip is a copy of:
// its cluster, and its namespace and name in the tenant. ok is false as
// for PodCluster, and also when two Pods claim the address.
func (a Addresses) PodAt(ctx context.Context, ip string) (cluster string, pod types.NamespacedName, ok bool, err error) {
	pods, err := a.claimants(ctx, ip)
	if err != nil || len(pods) != 1 {
		return "", pod, false, err
	}
	p := pods[0]
	pod = types.NamespacedName{Namespace: p.Annotations[syncer.AnnotationTenantNamespace], Name: p.Annotations[syncer.AnnotationTenantName]}
	return p.Labels[syncer.LabelCluster], pod, pod.Name != "", nil
}

// PodCluster says which tenant cluster's Pod the running host Pod of IP
// ip is: ok is false for an IP of no such Pod (or when no tenant syncs
// Pods), of Pods being deleted, or of Pods of two tenants at once. Host
// Pods with host networking share their node's IP, and are not told
// apart.
func (a Addresses) PodCluster(ctx context.Context, ip string) (cluster string, ok bool, err error) {
	pods, err := a.claimants(ctx, ip)
	if err != nil {
		return "", false, err
	}
	for _, p := range pods {
		c := p.Labels[syncer.LabelCluster]
		if cluster != "" && cluster != c {
			// An IP that two tenants' Pods claim (one reused before the
			// other's status caught up): neither is told the other's.
			return "", false, nil
		}
		cluster = c
	}
	return cluster, cluster != "", nil
}
