package pods

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/kubeletapi"
	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/tenantdns"
)

// Options tune the Pod syncer for one tenant. The zero Options are the
// safe default: the default Policy, virtual nodes of only the nodes that
// run the tenant's Pods, showing no address, no kubelet API and the host's
// DNS.
type Options struct {
	// Policy is what the host lets the tenant's Pods ask of it.
	Policy Policy

	// DNSConfig, if set, gives host Pods the tenant's DNS, as a tenant's
	// kubelet would: see DNSConfig.
	DNSConfig *DNSConfig

	// DNS, if set, answers the tenant's Pods' DNS queries with the
	// tenant's own names: the tenant joins it while it syncs Pods.
	// DNSConfig points host Pods at it.
	DNS *tenantdns.Server

	// KubeletAPI, if set, serves the kubelet API of the tenant's virtual
	// nodes (logs, exec, attach, port-forward), and virtual nodes give its
	// endpoint as their address and kubelet port. The tenant joins it
	// while it syncs Pods, trusting the client CA of its own API server.
	KubeletAPI *kubeletapi.Server

	// AllNodes gives the tenant a virtual node for every host node that
	// NodeSelector matches, whether or not its Pods run there (a
	// VirtualCluster's spec.nodeSync: All); otherwise it sees only the
	// nodes that run its Pods.
	AllNodes bool
	// NodeSelector limits AllNodes to the host nodes with these labels:
	// those the host policy lets the tenant's Pods run on.
	NodeSelector map[string]string

	// ExposeNodeAddresses copies host nodes' addresses and kubelet port to
	// the tenant's virtual nodes. Off by default: they tell a tenant where
	// the host's machines are, and a virtual node then shows only its name
	// as a Hostname address.
	ExposeNodeAddresses bool

	// CopyUnprefixedAnnotations copies annotations whose keys have no
	// prefix to host Pods. Off by default: container runtimes act on some
	// (io.kubernetes.cri-o.Devices, io.katacontainers.*).
	CopyUnprefixedAnnotations bool

	// InClusterServer is the https URL at which Pods running in the host
	// reach the tenant's API server (their KUBERNETES_SERVICE_HOST and
	// _PORT); "": the server of the tenant cluster's rest.Config.
	InClusterServer string
}

// Syncer syncs Pods down to run on the host, and brings where and how they
// run back up: the node (through a binding, as a scheduler would) and the
// status, with the Pod's IP. Tenant deletion is mirrored with the tenant's
// grace period, and completed in the tenant once the host Pod is gone, since
// a tenant has no kubelet to do it; a Pod evicted in the tenant is evicted
// in the host, so the host's PodDisruptionBudgets hold, and stays
// Terminating in the tenant until the host allows it. A Pod whose host Pod
// is gone after it was scheduled is never run again: it ends Failed
// (ReasonHostPodEvicted, ReasonHostPodPreempted, ReasonHostPodDeleted).
//
// A host Pod can only reach its own host namespace: every object a Pod spec
// names (ConfigMaps, Secrets, ServiceAccounts, claims, pull secrets) is
// looked up in the namespace of the Pod, which holds only this tenant
// namespace's copies. It never gets a host token: it reaches its own
// tenant's API server with a token the tenant issued (see APIAccess).
//
// Each tenant that runs the syncer also gets its virtual nodes, its Pods'
// API access Secrets, and, when opts give their servers, its place in the
// kubelet API and the DNS server: the syncer's Extensions, built from
// opts. A custom Pod syncer may start from this one and replace a field:
// its Lifecycle holds the Pod's life in a tenant without a kubelet, its
// Extensions what the tenant gets beside its Pods' copies.
func Syncer(opts Options) syncer.Syncer {
	policy := opts.Policy
	hostIP := shownHostIP(opts)
	views := &nodeViews{}
	return syncer.Syncer{
		Name:                      "pods",
		Usage:                     usage,
		Object:                    func() client.Object { return &corev1.Pod{} },
		CopyUserMetadata:          true,
		DenyUnprefixedAnnotations: !opts.CopyUnprefixedAnnotations,
		Down: func(t, h client.Object) error {
			tenant, host := t.(*corev1.Pod), h.(*corev1.Pod)
			if host.ResourceVersion == "" {
				cluster := host.Labels[syncer.LabelCluster]
				nodes, err := views.nodesFor(cluster, &tenant.Spec)
				if err != nil {
					return err
				}
				spec, err := specDown(tenant, cluster, nodes, policy, opts.DNSConfig)
				if hostIP != nil {
					showHostIP(&spec, hostIP())
				}
				host.Spec = spec
				recordTenantGates(host, tenant.Spec.SchedulingGates)
				return err
			}
			// A Pod's spec is immutable but for images, the deadline and
			// the removal of scheduling gates (a queue such as Kueue
			// admitting the Pod).
			syncImages(tenant.Spec.Containers, host.Spec.Containers)
			syncImages(tenant.Spec.InitContainers, host.Spec.InitContainers)
			host.Spec.ActiveDeadlineSeconds = tenant.Spec.ActiveDeadlineSeconds
			host.Spec.SchedulingGates = slices.DeleteFunc(host.Spec.SchedulingGates, removedByTenant(host, tenant))
			return nil
		},
		// A Pod the tenant bound by name goes to its node by name too,
		// where the host allows (see bindByName); a copy the host refuses
		// so is made pinned to the node alone, as Down made it.
		Prefer: func(t, h client.Object) []string {
			tenant, host := t.(*corev1.Pod), h.(*corev1.Pod)
			if tenant.Spec.NodeName == "" || host.ResourceVersion != "" {
				return nil // a Pod's node is set once, as it is made
			}
			node, err := views.hostNode(host.Labels[syncer.LabelCluster], tenant.Spec.NodeName)
			if err != nil || !bindByName(tenant, host, node) {
				return nil // pinned: the host's scheduler places it
			}
			return []string{"spec.nodeName"}
		},
		Stripped: func(t client.Object) string {
			spec := t.(*corev1.Pod).Spec.DeepCopy()
			stripped, err := policy.apply(spec, "") // what is left out does not depend on the cluster
			if err != nil {
				return "" // refused, and told so
			}
			return strings.Join(stripped, "; ")
		},
		Up:         upWith(hostIP),
		Lifecycle:  lifecycle{},
		Extensions: extensions(opts, views),
	}
}

// extensions are what a tenant that syncs Pods gets beside their copies.
func extensions(opts Options, views *nodeViews) []syncer.Extension {
	out := []syncer.Extension{
		&virtualNodesExtension{opts: opts, views: views},
		&apiAccessExtension{inClusterServer: opts.InClusterServer},
		resizeExtension{},
		ephemeralExtension{policy: opts.Policy, hostIP: shownHostIP(opts)},
	}
	if opts.KubeletAPI != nil {
		out = append(out, &kubeletExtension{server: opts.KubeletAPI, inClusterServer: opts.InClusterServer})
	}
	if opts.DNS != nil {
		out = append(out, &dnsExtension{server: opts.DNS, inClusterServer: opts.InClusterServer})
	}
	return out
}

// lifecycle is the Pod syncer's syncer.Lifecycle: a Pod that ran is never
// run again, a refusal is told as a scheduler tells an unschedulable Pod,
// an eviction goes through the host's PodDisruptionBudgets, and a deletion
// completes once the host Pod is gone.
type lifecycle struct{}

// Created says whether a tenant Pod's host copy was made, and so may have
// run: the tenant Pod has ended (Succeeded or Failed: a Pod that ended,
// refused by its node's kubelet too, never runs again), or it carries the
// host's verdict that its copy was placed (PodScheduled=True, copied up
// with the status) and the node it is bound to. A Pod the tenant created
// with a node name of its own and that no host Pod's status reached yet
// was not.
func (lifecycle) Created(t client.Object) bool {
	pod := t.(*corev1.Pod)
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	return pod.Spec.NodeName != "" && slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue
	})
}

// evictionByEvictionAPI is the DisruptionTarget reason the API server gives
// a Pod it evicts (k8s.io/api names no constant for it).
const evictionByEvictionAPI = "EvictionByEvictionAPI"

// Reasons a tenant Pod ends Failed with when its host Pod is gone.
const (
	ReasonHostPodEvicted   = "Evicted"
	ReasonHostPodPreempted = "Preempted"
	ReasonHostPodDeleted   = "HostPodDeleted"
)

// Lost ends a tenant Pod whose host Pod is gone after it was scheduled:
// Failed, with a reason and message that say what happened in the host, as
// far as the host Pod's last status (copied up while it terminated) tells.
// The tenant's controllers then replace it as on any cluster; it is never
// run again in the host. A Pod that had already ended keeps its ending.
func (lifecycle) Lost(ctx context.Context, c client.Client, t client.Object) error {
	pod := t.(*corev1.Pod)
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	reason, message := ReasonHostPodDeleted, "the Pod's copy in the host was deleted"
	for _, cond := range pod.Status.Conditions {
		if !isDisruptionTarget(cond) {
			continue
		}
		switch cond.Reason {
		case evictionByEvictionAPI, corev1.PodReasonTerminationByKubelet:
			reason, message = ReasonHostPodEvicted, "the Pod was evicted in the host"
		case corev1.PodReasonPreemptionByScheduler:
			reason, message = ReasonHostPodPreempted, "the Pod was preempted in the host"
		default:
			message = "the Pod's copy in the host was deleted (" + cond.Reason + ")"
		}
		if cond.Message != "" {
			message += ": " + cond.Message
		}
	}
	pod.Status.Reason, pod.Status.Message = reason, message
	endFailed(pod, reason, message)
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("failing the tenant Pod: %w", err)
	}
	return nil
}

// HostRejected tells a tenant Pod that the host refused to run it, as a
// scheduler tells of a Pod it cannot place: PodScheduled=False, with the
// host's message. The host Pod's status replaces it once the host accepts.
func (lifecycle) HostRejected(ctx context.Context, c client.Client, t client.Object, message string) error {
	pod := t.(*corev1.Pod)
	if pod.Spec.NodeName != "" || !pod.DeletionTimestamp.IsZero() {
		return nil // it runs, or goes: the host refused a change or an eviction, told by the Event alone
	}
	want := corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: syncer.ReasonHostRejected, Message: message,
	}
	i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled })
	switch {
	case i < 0:
		want.LastTransitionTime = metav1.Now()
		pod.Status.Conditions = append(pod.Status.Conditions, want)
	case pod.Status.Conditions[i].Status == want.Status && pod.Status.Conditions[i].Reason == want.Reason &&
		pod.Status.Conditions[i].Message == want.Message:
		return nil
	default:
		want.LastTransitionTime = pod.Status.Conditions[i].LastTransitionTime
		if pod.Status.Conditions[i].Status != want.Status {
			want.LastTransitionTime = metav1.Now()
		}
		pod.Status.Conditions[i] = want
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("reporting the host's refusal on the tenant Pod: %w", err)
	}
	return nil
}

// specDown is the host Pod spec for a tenant Pod of VirtualCluster
// cluster, nodes its virtual nodes: left to the host's scheduler under
// policy (a Pod the tenant bound to a node by name pinned to that node),
// resolving through dns (nil: the host's DNS), and reaching its own
// tenant's API server (APIAccess).
func specDown(tenant *corev1.Pod, cluster string, nodes []corev1.Node, policy Policy, dns *DNSConfig) (corev1.PodSpec, error) {
	spec := *tenant.Spec.DeepCopy()
	// Before the host policy, whose node selector goes on top.
	place(&spec, nodes)
	if spec.NodeName != "" {
		// Bound by the tenant past its scheduler: on that node, or none.
		pin(&spec, spec.NodeName)
	}
	spec.NodeName = "" // the host schedules (but see bindByName)
	// The host's token would be the host's credential; the tenant's comes
	// from the API access Secret.
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.DeprecatedServiceAccount = spec.ServiceAccountName
	spec.EphemeralContainers = nil
	if _, err := policy.apply(&spec, cluster); err != nil {
		return spec, err
	}
	if dns != nil {
		dns.apply(&spec, tenant.Namespace)
	}
	return spec, APIAccess(tenant.Name, &spec)
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

// shownHostIP is, when opts hide host nodes' addresses, the host IP that a
// tenant Pod shows instead of its host node's: its virtual node's address,
// the kubelet API's endpoint, or none. Nil when the addresses are shown.
func shownHostIP(opts Options) func() string {
	switch {
	case opts.ExposeNodeAddresses:
		return nil
	case opts.KubeletAPI != nil:
		return func() string {
			address, _ := opts.KubeletAPI.Endpoint()
			if net.ParseIP(address) == nil {
				return ""
			}
			return address
		}
	}
	return func() string { return "" }
}

// showHostIP makes the downward API's status.hostIP and status.hostIPs
// give a container what its tenant Pod's status shows (ip, the virtual
// node's address, or none), not the host node's address, which the host
// keeps to itself (see Options.ExposeNodeAddresses).
func showHostIP(spec *corev1.PodSpec, ip string) {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			for j := range cs[i].Env {
				e := &cs[i].Env[j]
				if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
					continue
				}
				if p := e.ValueFrom.FieldRef.FieldPath; p == "status.hostIP" || p == "status.hostIPs" {
					e.Value, e.ValueFrom = ip, nil
				}
			}
		}
	}
}

// upWith binds the tenant Pod to the host Pod's node, then, in a later
// sync, copies the status, with hostIP, if set, for the host node's IP. The
// status of a Pod bound to its host Pod's node waits until the tenant has
// that Node (the Syncer's virtual nodes extension makes it once the Pod is
// bound; a Pod syncer without that extension must not use this Up): a
// tenant never sees a Pod running on a node it does not have, for which
// its API server would refuse kubectl logs and exec (answering, in the
// Pod's name, that the node is not found).
func upWith(hostIP func() string) func(context.Context, client.Client, client.Object, client.Object) (bool, error) {
	copyStatus := statusCopier(hostIP)
	return func(ctx context.Context, c client.Client, h, t client.Object) (bool, error) {
		return up(ctx, c, h, t, copyStatus)
	}
}

func up(ctx context.Context, c client.Client, h, t client.Object, copyStatus func(context.Context, client.Client, client.Object, client.Object) (bool, error)) (bool, error) {
	host, tenant := h.(*corev1.Pod), t.(*corev1.Pod)
	if host.Spec.NodeName != "" && tenant.Spec.NodeName == "" {
		binding := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenant.Namespace, Name: tenant.Name, UID: tenant.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: host.Spec.NodeName},
		}
		if err := c.SubResource("binding").Create(ctx, tenant, binding); err != nil {
			return false, fmt.Errorf("binding tenant Pod to node %s: %w", host.Spec.NodeName, err)
		}
		tellScheduling(ctx, c, tenant, corev1.EventTypeNormal, ReasonScheduled,
			fmt.Sprintf("Successfully assigned %s/%s to %s", tenant.Namespace, tenant.Name, host.Spec.NodeName))
		return true, nil // the binding changes the tenant Pod: its event brings the status
	}
	// Only for the node the host Pod runs on, which the virtual nodes
	// extension makes: a node name the tenant wrote itself is not made.
	if tenant.Spec.NodeName != "" && tenant.Spec.NodeName == host.Spec.NodeName {
		if err := c.Get(ctx, client.ObjectKey{Name: tenant.Spec.NodeName}, &corev1.Node{}); apierrors.IsNotFound(err) {
			return false, syncer.NotYet("the tenant has no Node %s for the Pod's status yet", tenant.Spec.NodeName)
		} else if err != nil {
			return false, fmt.Errorf("reading the Pod's tenant Node %s: %w", tenant.Spec.NodeName, err)
		}
	}
	unschedulable, tell := newlyUnschedulable(host, tenant)
	changed, err := copyStatus(ctx, c, h, t)
	if err == nil && changed && tell {
		tellScheduling(ctx, c, tenant, corev1.EventTypeWarning, ReasonFailedScheduling, unschedulable)
	}
	return changed, err
}

// statusCopier brings the host Pod's status up, with hostIP, if set, for
// the host node's IP. A DisruptionTarget condition that the tenant set (its
// API server does, on an eviction, just before it deletes the Pod) stays
// until the host has one of its own, so that the host Pod is evicted, not
// deleted.
func statusCopier(hostIP func() string) func(context.Context, client.Client, client.Object, client.Object) (bool, error) {
	return syncer.StatusUp(func(h, t client.Object) bool { return copyStatus(h, t, hostIP) })
}

func copyStatus(h, t client.Object, hostIP func() string) bool {
	host, tenant := h.(*corev1.Pod), t.(*corev1.Pod)
	status := *host.Status.DeepCopy()
	if hostIP != nil && status.HostIP != "" {
		// The host node's address is the host's business.
		status.HostIP, status.HostIPs = hostIP(), nil
		if status.HostIP != "" {
			status.HostIPs = []corev1.HostIP{{IP: status.HostIP}}
		}
	}
	status.Message = withoutNodeUsage(status.Reason, status.Message)
	// The tenant's API server set the tenant Pod's QoS class at creation,
	// from its own view (no host LimitRange), and it never changes.
	status.QOSClass = tenant.Status.QOSClass
	// Containers the host added (a mesh's proxy, a log shipper) are the
	// host's business, and so are its own ephemeral containers.
	status.InitContainerStatuses = tenantsOwn(status.InitContainerStatuses, tenant.Spec.InitContainers)
	status.ContainerStatuses = tenantsOwn(status.ContainerStatuses, tenant.Spec.Containers)
	status.EphemeralContainerStatuses = ephemeralStatuses(host, tenant)
	observedGenerations(host, tenant, &status)
	if i := slices.IndexFunc(tenant.Status.Conditions, isEvictionMark); i >= 0 {
		j := slices.IndexFunc(status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.DisruptionTarget })
		switch {
		case j < 0:
			status.Conditions = append(status.Conditions, tenant.Status.Conditions[i])
		case status.Conditions[j].Status != corev1.ConditionTrue:
			status.Conditions[j] = tenant.Status.Conditions[i]
		}
	}
	if equality.Semantic.DeepEqual(status, tenant.Status) {
		return false
	}
	tenant.Status = status
	return true
}

// withoutNodeUsage is the message of a Pod's status without what a
// kubelet that refused the Pod for want of a resource (reason OutOf<name>)
// says of its node: "Node didn't have enough resource: cpu, requested: R,
// used: U, capacity: C", where U is what every Pod on the node asks,
// other tenants' among them. The resource's name stays.
func withoutNodeUsage(reason, message string) string {
	if !strings.HasPrefix(reason, "OutOf") {
		return message
	}
	if i := strings.Index(message, ", requested:"); i >= 0 {
		return message[:i]
	}
	return message
}

// tenantsOwn are the statuses of the tenant Pod's own containers, of a
// host Pod's statuses.
func tenantsOwn(statuses []corev1.ContainerStatus, containers []corev1.Container) []corev1.ContainerStatus {
	out := slices.DeleteFunc(slices.Clone(statuses), func(s corev1.ContainerStatus) bool {
		return !slices.ContainsFunc(containers, func(c corev1.Container) bool { return c.Name == s.Name })
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// observedGenerations turns the generations of the host Pod that the
// host's kubelet reports it has seen (status.observedGeneration and each
// condition's) into the tenant Pod's: the tenant Pod's generation once the
// host's kubelet has seen the host Pod's latest spec, which the sync just
// made from the tenant's (so that a client waiting for its spec update to
// be observed sees it); the tenant's earlier value until then. A kubelet
// that reports none (0, before Kubernetes 1.34) gives none.
func observedGenerations(host, tenant *corev1.Pod, status *corev1.PodStatus) {
	mapped := func(hostObserved, before int64) int64 {
		switch {
		case hostObserved == 0:
			return 0
		case hostObserved >= host.Generation:
			return tenant.Generation
		}
		return before
	}
	status.ObservedGeneration = mapped(host.Status.ObservedGeneration, tenant.Status.ObservedGeneration)
	for i := range status.Conditions {
		c := &status.Conditions[i]
		before := status.ObservedGeneration
		if j := slices.IndexFunc(tenant.Status.Conditions, func(t corev1.PodCondition) bool { return t.Type == c.Type }); j >= 0 {
			before = tenant.Status.Conditions[j].ObservedGeneration
		}
		c.ObservedGeneration = mapped(c.ObservedGeneration, before)
	}
}

func isDisruptionTarget(c corev1.PodCondition) bool {
	return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue
}

// isEvictionMark says whether c is the mark of an eviction through the
// Eviction API.
func isEvictionMark(c corev1.PodCondition) bool {
	return isDisruptionTarget(c) && c.Reason == evictionByEvictionAPI
}

// DeleteHost removes the host Pod of a tenant Pod being deleted: by
// eviction when the tenant evicted it, so that the host's
// PodDisruptionBudgets decide when it goes (the host refuses with 429 until
// they allow it, and the framework retries with backoff), by a plain
// delete otherwise.
func (lifecycle) DeleteHost(ctx context.Context, c client.Client, t, h client.Object, opts ...client.DeleteOption) error {
	tenant := t.(*corev1.Pod)
	if !slices.ContainsFunc(tenant.Status.Conditions, isEvictionMark) {
		return c.Delete(ctx, h, opts...)
	}
	deleteOptions := (&client.DeleteOptions{}).ApplyOptions(opts).AsDeleteOptions()
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: h.GetNamespace(), Name: h.GetName()},
		DeleteOptions: deleteOptions,
	}
	if err := c.SubResource("eviction").Create(ctx, h, eviction); err != nil {
		return fmt.Errorf("evicting the host Pod: %w", err)
	}
	return nil
}

// endFailed ends pod Failed, as a kubelet ends a Pod it stops: every
// container that had not terminated is killed (exit code 137, with reason
// and message), and the Pod is no longer ready.
func endFailed(pod *corev1.Pod, reason, message string) {
	now := metav1.Now()
	pod.Status.Phase = corev1.PodFailed
	for i, cond := range pod.Status.Conditions {
		if (cond.Type == corev1.PodReady || cond.Type == corev1.ContainersReady) && cond.Status != corev1.ConditionFalse {
			pod.Status.Conditions[i] = corev1.PodCondition{Type: cond.Type, Status: corev1.ConditionFalse, Reason: reason, LastTransitionTime: now}
		}
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range statuses {
			cs := &statuses[i]
			if cs.State.Terminated == nil {
				cs.LastTerminationState = cs.State
				cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 137, Reason: reason, Message: message, FinishedAt: now,
				}}
				cs.Ready, cs.Started = false, ptr.To(false)
			}
		}
	}
}

// reasonContainerStatusUnknown is the reason a container of a deleted
// tenant Pod ends with when its host Pod went before its end was seen:
// the kubelet's, for a container it no longer finds.
const reasonContainerStatusUnknown = "ContainerStatusUnknown"

// FinishDelete removes a terminating tenant Pod once its host Pod is
// gone: the tenant's kubelet would, but a tenant has none. A Pod that a
// finalizer keeps (a Job's, whose controller counts the Pod's ending
// first) is ended Failed before, as a kubelet ends a Pod it stops, unless
// it had ended: its controller then reads how it ended (an eviction's
// DisruptionTarget condition, for a Job's pod failure policy) and lets it
// go.
func (lifecycle) FinishDelete(ctx context.Context, c client.Client, t client.Object) error {
	pod := t.(*corev1.Pod)
	if len(pod.Finalizers) > 0 && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		endFailed(pod, reasonContainerStatusUnknown, "the container was stopped as its Pod was deleted")
		if err := c.Status().Update(ctx, pod); err != nil {
			return fmt.Errorf("ending the deleted tenant Pod: %w", err)
		}
	}
	return c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: ptr.To(pod.GetUID())})
}

// AnnotationTenantSchedulingGates, on a host Pod, records the scheduling
// gates of its tenant Pod when the copy was made (comma-separated): of
// the host Pod's gates, only those are the tenant's to remove. A gate the
// host added as it admitted the copy (a webhook, a queue such as Kueue)
// stays until the host removes it, whatever the tenant does; and the API
// lets no one add a gate back once it is gone.
const AnnotationTenantSchedulingGates = "tenantry.dev/tenant-scheduling-gates"

// recordTenantGates writes which of a new host Pod's gates are the
// tenant's.
func recordTenantGates(host *corev1.Pod, gates []corev1.PodSchedulingGate) {
	if len(gates) == 0 {
		return
	}
	names := make([]string, len(gates))
	for i, g := range gates {
		names[i] = g.Name
	}
	annotations := host.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationTenantSchedulingGates] = strings.Join(names, ",")
	host.SetAnnotations(annotations)
}

// removedByTenant says whether a host Pod's gate is one its tenant Pod had
// and has removed. A host Pod made before Tenantry kept the record has
// none: its gates stay, since the tenant's cannot be told from the host's.
func removedByTenant(host, tenant *corev1.Pod) func(corev1.PodSchedulingGate) bool {
	recorded := strings.Split(host.Annotations[AnnotationTenantSchedulingGates], ",")
	return func(g corev1.PodSchedulingGate) bool {
		return slices.Contains(recorded, g.Name) && !slices.Contains(tenant.Spec.SchedulingGates, g)
	}
}
