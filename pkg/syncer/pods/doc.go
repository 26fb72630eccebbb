// Package pods runs tenants' Pods in the host, and gives each tenant what
// its Pods need to behave as on a cluster of its own. Syncer is the Pod
// syncer, built per tenant from Options; package builtin offers it among
// the built-in syncers, by the name "pods".
//
// # The Pod and its copy
//
// A tenant Pod is copied into the host, where the host schedules and runs
// it, under a Policy (what the host lets the tenant's Pods ask of it); its
// node and status come back up. Its life in a tenant that has no kubelet
// is the Syncer's Lifecycle: a Pod that ran is never run again (it ends
// Failed, ReasonHostPodEvicted, ReasonHostPodPreempted or
// ReasonHostPodDeleted), a refused Pod shows PodScheduled=False, a Pod
// evicted in the tenant is evicted in the host under its
// PodDisruptionBudgets, and a deletion completes once the host Pod is gone.
// The host scheduler's verdicts reach the tenant Pod as Events
// (ReasonFailedScheduling, ReasonScheduled). What a Pod asks of node labels
// and taints that the tenant set itself on its virtual nodes is resolved
// against them, and the host Pod asks for the nodes that fit by name.
//
// # What a tenant gets beside its Pods' copies
//
// The Syncer's Extensions, set up in every tenant that syncs Pods:
//
//   - Virtual nodes: a Node for every host node that runs one of the
//     tenant's Pods (the host node's labels, and those the tenant sets,
//     capacity, conditions and a Lease renewed as a kubelet would; removed
//     with its last Pod), or, with
//     Options.AllNodes, for every host node Options.NodeSelector allows. A
//     tenant's own Node of the same name is left alone
//     (ReasonNodeConflict).
//   - API access: for every host Pod whose spec APIAccess rewrote, an API
//     access Secret (its name ends in APIAccessSecretSuffix) with a token
//     that the tenant issued for the Pod's ServiceAccount, so that the Pod
//     reaches its own tenant API server (Options.InClusterServer).
//   - The kubelet API (Options.KubeletAPI, package kubeletapi): the
//     tenant's API server reaches its virtual nodes' kubelet API there,
//     for kubectl logs, exec, attach and port-forward.
//   - DNS (Options.DNS, package tenantdns): the tenant's Pods resolve its
//     own names; DNSConfig points host Pods at the server.
//
// A custom Pod syncer may start from Syncer and replace what it needs to:
// its Lifecycle and Extensions are plain fields of syncer.Syncer.
package pods
