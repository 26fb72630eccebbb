package pods

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tenantry/tenantry/pkg/kubeletapi"
	"github.com/tenantry/tenantry/pkg/syncer"
)

// A virtual node's Lease is renewed as a kubelet renews its node's: every
// nodeLeaseRenewInterval, for nodeLeaseDuration. The tenant's node
// lifecycle controller marks a node whose Lease is older than its
// node-monitor-grace-period (50 s by default) Unknown, and then evicts its
// Pods.
const (
	nodeLeaseDuration      = 40 * time.Second
	nodeLeaseRenewInterval = 10 * time.Second
	// nodeLeaseNamespace holds the tenant's node Leases.
	nodeLeaseNamespace = corev1.NamespaceNodeLease
)

// podNodeNameIndex indexes a tenant's Pods by spec.nodeName.
const podNodeNameIndex = "spec.nodeName"

// tenantryPrefix starts the label keys that only Tenantry sets: a virtual
// node takes none of its host node's.
const tenantryPrefix = "tenantry.dev/"

// ReasonNodeConflict is the reason of the Warning Event a tenant Node gets
// when the tenant made a Node of the name of a host node that runs its Pods:
// Tenantry leaves it alone, and the tenant's controllers see that node.
const ReasonNodeConflict = "NodeConflict"

// virtualNodes gives one tenant a Node for every host node that runs one of
// its Pods (and, with Options.AllNodes, for every host node its node
// selector allows), and no other: the tenant's controllers (PodGC, the node
// lifecycle controller, EndpointSlices, the scheduler's view in tools) then
// treat its bound Pods as on any cluster. A virtual node carries the host
// node's labels, capacity, allocatable, conditions and system info (less
// the machine's identity); its addresses only when the Options say so. Its
// Lease is renewed while the host node exists, so that the host node's own
// conditions, not Tenantry's liveness, decide its readiness. It goes when no
// Pod of the tenant runs on it any more (a tenant Pod whose host Pod is gone
// no longer counts: the tenant's PodGC then removes it, as a cluster
// removes the Pods of a node it lost), or its host node goes.
//
// A tenant Node without the Tenantry label is the tenant's own: it is never
// changed or deleted.
type virtualNodes struct {
	scope           *syncer.TenantScope
	tenant          client.Client // the tenant's cached client
	recorder        events.EventRecorder
	exposeAddresses bool
	// kubelet, if set, serves the virtual nodes' kubelet API.
	kubelet *kubeletapi.Server
	// allNodes shows every host node that nodeSelector matches, beside
	// those that run the tenant's Pods.
	allNodes     bool
	nodeSelector labels.Selector

	// live holds the names of the nodes the tenant has a virtual node of (or
	// is about to), so that host node events for other nodes, the most of
	// them, cost a map lookup.
	live sync.Map
}

// virtualNodesExtension runs virtualNodes in every tenant that syncs Pods.
type virtualNodesExtension struct {
	opts Options
	// views hand the tenant's virtual nodes to the Pod syncer's Down.
	views *nodeViews
}

// Setup runs the tenant's virtual nodes.
func (e *virtualNodesExtension) Setup(scope *syncer.TenantScope) error {
	mgr := scope.Manager()
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podNodeNameIndex, func(o client.Object) []string {
		if name := o.(*corev1.Pod).Spec.NodeName; name != "" {
			return []string{name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing tenant Pods by node: %w", err)
	}
	if e.views != nil {
		unregister := e.views.register(scope.Cluster(), mgr.GetClient(), scope.HostReader())
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			<-ctx.Done()
			unregister()
			return nil
		})); err != nil {
			unregister()
			return fmt.Errorf("handing the tenant's nodes to the Pod syncer: %w", err)
		}
	}
	r := &virtualNodes{
		scope: scope, tenant: mgr.GetClient(), recorder: mgr.GetEventRecorder("tenantry-syncer"),
		exposeAddresses: e.opts.ExposeNodeAddresses, kubelet: e.opts.KubeletAPI,
		allNodes: e.opts.AllNodes, nodeSelector: labels.SelectorFromSet(e.opts.NodeSelector),
	}
	byNode := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.(*corev1.Pod).Spec.NodeName; name != "" && !scope.Excluded(o.GetNamespace()) {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
		}
		return nil
	})
	return scope.RunController("virtual-nodes", 1, r,
		scope.TenantObjects(&corev1.Node{}, predicate.NewPredicateFuncs(isManaged)),
		// A Pod counts once bound, and until deleted.
		source.Kind[client.Object](mgr.GetCache(), &corev1.Pod{}, byNode, predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectOld.(*corev1.Pod).Spec.NodeName != e.ObjectNew.(*corev1.Pod).Spec.NodeName
			},
		}),
		scope.HostNodes(func(name string) bool {
			_, ok := r.live.Load(name)
			return ok || r.allNodes
		}),
		// A host copy that comes (back) into the cache, or goes, may make
		// its node the tenant's, or no longer.
		scope.HostEvents(&corev1.Pod{}, func(h client.Object) (types.NamespacedName, bool) {
			name := h.(*corev1.Pod).Spec.NodeName
			return types.NamespacedName{Name: name}, name != ""
		}))
}

func isManaged(o client.Object) bool {
	return o.GetLabels()[syncer.LabelManagedBy] == syncer.ManagedByValue
}

func (r *virtualNodes) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	name := req.Name
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("node", name))
	host, err := r.shown(ctx, name)
	if err != nil {
		return reconcile.Result{}, err
	}
	var tenant corev1.Node
	found := true
	if err := r.tenant.Get(ctx, req.NamespacedName, &tenant); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("reading tenant node %s: %w", name, err)
		}
		found = false
	}
	if found && !isManaged(&tenant) {
		if host != nil {
			r.recorder.Eventf(&tenant, nil, corev1.EventTypeWarning, ReasonNodeConflict, "Sync",
				"the tenant's Pods run on host node %s, but this Node of that name is the tenant's own: it is left alone", name)
		}
		r.live.Delete(name)
		return reconcile.Result{}, nil
	}

	if host == nil || !host.DeletionTimestamp.IsZero() {
		// No Pod of the tenant is bound to it, or the host node is gone:
		// the tenant's PodGC then ends the Pods still bound to it.
		r.live.Delete(name)
		if !found {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, r.remove(ctx, &tenant)
	}
	r.live.Store(name, true)
	if !found {
		err = r.create(ctx, host)
	} else {
		err = r.update(ctx, host, &tenant)
	}
	if why, after := r.scope.Transient(err); why != "" {
		// A Lease or node written meanwhile, say: the next renewal catches up.
		ctrl.LoggerFrom(ctx).V(1).Info("retrying the virtual node: "+why, "error", err.Error())
		return reconcile.Result{RequeueAfter: after}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	// The Lease is renewed on this requeue, as long as the node lives.
	return reconcile.Result{RequeueAfter: nodeLeaseRenewInterval}, nil
}

// shown is the host node that the tenant sees as its Node name, or nil if
// it sees none: with allNodes, a host node that nodeSelector matches; and
// in any case, one that runs a Pod of the tenant (see bound).
func (r *virtualNodes) shown(ctx context.Context, name string) (*corev1.Node, error) {
	read := func() (*corev1.Node, error) {
		host := &corev1.Node{}
		if err := r.scope.HostReader().Get(ctx, client.ObjectKey{Name: name}, host); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("reading host node %s: %w", name, err)
		}
		return host, nil
	}
	if r.allNodes {
		host, err := read()
		if err != nil || (host != nil && r.nodeSelector.Matches(labels.Set(host.Labels))) {
			return host, err
		}
	}
	bound, err := r.bound(ctx, name)
	if err != nil || !bound {
		return nil, err
	}
	return read()
}

// maxHostReads bounds the host copies bound reads from the host itself,
// not its cache, in one call.
const maxHostReads = 3

// bound says whether a Pod of the tenant runs on host node name: bound to
// it in the tenant, and its host copy in the host. The tenant's word alone
// is not enough: a tenant could name any host node in a Pod of its own (or
// in its status) to see that node.
func (r *virtualNodes) bound(ctx context.Context, name string) (bool, error) {
	var pods corev1.PodList
	if err := r.tenant.List(ctx, &pods, client.MatchingFields{podNodeNameIndex: name}); err != nil {
		return false, fmt.Errorf("listing tenant Pods on node %s: %w", name, err)
	}
	hostReads := 0
	for _, p := range pods.Items {
		if r.scope.Excluded(p.Namespace) {
			continue
		}
		var host corev1.Pod
		key := r.scope.HostKey(client.ObjectKeyFromObject(&p))
		err := r.scope.HostReader().Get(ctx, key, &host)
		if apierrors.IsNotFound(err) && p.DeletionTimestamp.IsZero() && p.Status.PodIP != "" && hostReads < maxHostReads {
			// The cache holds only copies labelled as Tenantry's: one whose
			// labels someone took off (Tenantry puts them back) is read
			// from the host itself, so that its node does not go from the
			// tenant meanwhile (its kubectl logs would fail). Only for a
			// Pod that ran in the host (its status, Tenantry's, has an IP),
			// and a few a call: a tenant's Pods that name a node and never
			// had a copy cost the host nothing.
			hostReads++
			err = r.scope.HostClient().Get(ctx, key, &host)
		}
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return false, fmt.Errorf("reading the host copy of Pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		if host.Spec.NodeName == name && host.Annotations[syncer.AnnotationTenantUID] == string(p.UID) {
			return true, nil
		}
	}
	return false, nil
}

// create makes the tenant's virtual node of host, its status and its
// Lease.
func (r *virtualNodes) create(ctx context.Context, host *corev1.Node) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: host.Name}}
	r.setSpec(host, node)
	if err := r.tenant.Create(ctx, node); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating virtual node %s: the tenant's cache has not seen it yet: %w", host.Name, err)
		}
		return fmt.Errorf("creating virtual node %s: %w", host.Name, err)
	}
	r.scope.CountWrite("nodes", "up", "create")
	ctrl.LoggerFrom(ctx).Info("created virtual node")
	return r.update(ctx, host, node)
}

// update brings the tenant's virtual node in line with host, and renews its
// Lease.
func (r *virtualNodes) update(ctx context.Context, host, tenant *corev1.Node) error {
	desired := tenant.DeepCopy()
	r.setSpec(host, desired)
	if !equality.Semantic.DeepEqual(tenant, desired) {
		if err := r.tenant.Update(ctx, desired); err != nil {
			return fmt.Errorf("updating virtual node %s: %w", host.Name, err)
		}
		r.scope.CountWrite("nodes", "up", "update")
		tenant = desired
	}
	desired = tenant.DeepCopy()
	desired.Status = r.status(host, tenant.Status)
	if !equality.Semantic.DeepEqual(tenant, desired) {
		if err := r.tenant.Status().Update(ctx, desired); err != nil {
			return fmt.Errorf("updating virtual node %s's status: %w", host.Name, err)
		}
		r.scope.CountWrite("nodes", "up", "update-status")
		tenant = desired
	}
	return r.renew(ctx, tenant)
}

// setSpec sets what a virtual node takes from its host node beyond status:
// the labels (Tenantry's own and the host node's, less Tenantry's reserved
// ones) and whether it is cordoned. Labels the tenant set itself stay, but
// for a key the host node has, whose value is the host's: the virtual
// node records (syncer.AnnotationCopiedLabels) which keys are the host
// node's, so that one the host drops goes. The tenant's own labels steer
// its Pods (see placement). Taints are not copied: the host already placed
// the Pod where its policy allows, and the tenant's taint manager would
// evict Pods for taints that the host Pod tolerates through host policy;
// the tenant's own node lifecycle controller sets the taints of readiness
// from the copied conditions.
func (r *virtualNodes) setSpec(host, node *corev1.Node) {
	labels := ownLabels(node)
	if labels == nil {
		labels = map[string]string{}
	}
	copied := make([]string, 0, len(host.Labels))
	for k, v := range host.Labels {
		if !strings.HasPrefix(k, tenantryPrefix) {
			labels[k] = v
			copied = append(copied, k)
		}
	}
	labels[syncer.LabelManagedBy] = syncer.ManagedByValue
	node.Labels = labels
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	slices.Sort(copied)
	node.Annotations[syncer.AnnotationCopiedLabels] = strings.Join(copied, ",")
	node.Spec.Unschedulable = host.Spec.Unschedulable
}

// ownLabels are the labels of virtual node node that the tenant set
// itself; nil for a node without a record of its host's (new, or made
// before records were kept: all its labels were the host's then).
func ownLabels(node *corev1.Node) map[string]string {
	record, recorded := node.Annotations[syncer.AnnotationCopiedLabels]
	if !recorded {
		return nil
	}
	fromHost := map[string]bool{}
	for _, k := range strings.Split(record, ",") {
		fromHost[k] = true
	}
	own := map[string]string{}
	for k, v := range node.Labels {
		if !fromHost[k] && k != syncer.LabelManagedBy {
			own[k] = v
		}
	}
	return own
}

// status is the virtual node's status for host's; current is what the
// tenant has.
func (r *virtualNodes) status(host *corev1.Node, current corev1.NodeStatus) corev1.NodeStatus {
	st := corev1.NodeStatus{
		Capacity:    maps.Clone(host.Status.Capacity),
		Allocatable: maps.Clone(host.Status.Allocatable),
		Conditions:  append([]corev1.NodeCondition(nil), host.Status.Conditions...),
		NodeInfo:    host.Status.NodeInfo,
		// The tenant's attach/detach bookkeeping, not the host's.
		VolumesInUse:    current.VolumesInUse,
		VolumesAttached: current.VolumesAttached,
	}
	// The machine's identity is the host's business.
	st.NodeInfo.MachineID, st.NodeInfo.SystemUUID, st.NodeInfo.BootID = "", "", ""
	switch {
	case r.kubelet != nil:
		// The tenant's API server reaches Tenantry's kubelet API here; the
		// host's external addresses follow only if exposed.
		address, port := r.kubelet.Endpoint()
		addressType := corev1.NodeInternalIP
		if net.ParseIP(address) == nil {
			addressType = corev1.NodeHostName
		}
		st.Addresses = []corev1.NodeAddress{{Type: addressType, Address: address}}
		if r.exposeAddresses {
			for _, a := range host.Status.Addresses {
				if a.Type == corev1.NodeExternalIP || a.Type == corev1.NodeExternalDNS {
					st.Addresses = append(st.Addresses, a)
				}
			}
		}
		st.DaemonEndpoints.KubeletEndpoint.Port = port
	case r.exposeAddresses:
		st.Addresses = append([]corev1.NodeAddress(nil), host.Status.Addresses...)
		st.DaemonEndpoints = host.Status.DaemonEndpoints
	default:
		st.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: host.Name}}
	}
	return st
}

// renew creates or renews the virtual node's Lease in kube-node-lease, owned
// by the node so that the tenant's garbage collector removes it with the
// node. A Lease renewed less than half an interval ago is left as is.
func (r *virtualNodes) renew(ctx context.Context, node *corev1.Node) error {
	key := client.ObjectKey{Namespace: nodeLeaseNamespace, Name: node.Name}
	var lease coordinationv1.Lease
	err := r.tenant.Get(ctx, key, &lease)
	switch {
	case apierrors.IsNotFound(err):
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{syncer.LabelManagedBy: syncer.ManagedByValue},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
		}
		renewLease(&lease, node.Name)
		if err := r.tenant.Create(ctx, &lease); err != nil {
			return fmt.Errorf("creating virtual node %s's Lease: %w", node.Name, err)
		}
		r.scope.CountWrite("leases", "up", "create")
		return nil
	case err != nil:
		return fmt.Errorf("reading virtual node %s's Lease: %w", node.Name, err)
	}
	if lease.Spec.RenewTime != nil && time.Since(lease.Spec.RenewTime.Time) < nodeLeaseRenewInterval/2 {
		return nil
	}
	renewLease(&lease, node.Name)
	if err := r.tenant.Update(ctx, &lease); err != nil {
		return fmt.Errorf("renewing virtual node %s's Lease: %w", node.Name, err)
	}
	r.scope.CountWrite("leases", "up", "update")
	return nil
}

// remove deletes a virtual node, precisely the one read, and its Lease.
func (r *virtualNodes) remove(ctx context.Context, node *corev1.Node) error {
	err := r.tenant.Delete(ctx, node, client.Preconditions{UID: ptr.To(node.UID)})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting virtual node %s: %w", node.Name, err)
	}
	if err == nil {
		r.scope.CountWrite("nodes", "up", "delete")
		ctrl.LoggerFrom(ctx).Info("deleted virtual node: its host node is gone, or no longer the tenant's")
	}
	var lease coordinationv1.Lease
	if err := r.tenant.Get(ctx, client.ObjectKey{Namespace: nodeLeaseNamespace, Name: node.Name}, &lease); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !isManaged(&lease) {
		return nil
	}
	if err := r.tenant.Delete(ctx, &lease, client.Preconditions{UID: ptr.To(lease.UID)}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting virtual node %s's Lease: %w", node.Name, err)
	}
	return nil
}
