package pods

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// A tenant's own node labels and taints steer its Pods, as on a cluster
// of its own: a label the tenant sets on a virtual node never reaches the
// host node, so the host's scheduler cannot read it. Where a Pod's node
// selector or required node affinity names a label the tenant set itself,
// the Pod syncer resolves what the Pod asks of its node against the
// tenant's virtual nodes (their labels, the host's and the tenant's own,
// and their taints, which are all the tenant's) and gives the host Pod the
// names of the nodes that fit, as a node affinity the host's scheduler
// reads. Nothing the tenant writes reaches a host Node, and the host
// policy's node selector still applies on top. What a Pod asks only of the
// host's labels goes to the host as it is.
//
// The nodes are resolved once, when the host Pod is made (a host Pod's
// node affinity cannot change): a Pod that no node fits then keeps the
// tenant's label in its node selector, which no host node has, and stays
// Pending with the host scheduler's FailedScheduling.

// nodeViews give the Pod syncer's Down, which runs for every tenant, each
// tenant's virtual nodes: the virtual nodes extension registers the tenant
// cluster's node reader as the tenant starts, and takes it back as it
// stops.
type nodeViews struct {
	mu   sync.Mutex
	next int
	// byCluster holds each cluster's readers by registration: a cluster
	// re-spawned while its old app stops has two, the newest last.
	byCluster map[string][]nodeView
}

type nodeView struct {
	id int
	// tenant reads the tenant's virtual nodes, host the host's nodes.
	tenant, host client.Reader
}

// register makes tenant and host, readers of the tenant's and the host's
// nodes, cluster's node view until unregister is called.
func (v *nodeViews) register(cluster string, tenant, host client.Reader) (unregister func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.byCluster == nil {
		v.byCluster = map[string][]nodeView{}
	}
	v.next++
	id := v.next
	v.byCluster[cluster] = append(v.byCluster[cluster], nodeView{id: id, tenant: tenant, host: host})
	return func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		v.byCluster[cluster] = slices.DeleteFunc(v.byCluster[cluster], func(n nodeView) bool { return n.id == id })
		if len(v.byCluster[cluster]) == 0 {
			delete(v.byCluster, cluster)
		}
	}
}

// nodeReadTimeout bounds a read of nodes from a cache: a tenant's virtual
// nodes, or a host node.
const nodeReadTimeout = 10 * time.Second

// virtualNodesOf are cluster's virtual nodes, from its newest registered
// reader; none when it has no reader (its virtual nodes do not run).
func (v *nodeViews) virtualNodesOf(cluster string) ([]corev1.Node, error) {
	view, ok := v.newest(cluster)
	if !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeReadTimeout)
	defer cancel()
	var nodes corev1.NodeList
	// Read only (place never writes a node): the cache's own objects.
	if err := view.tenant.List(ctx, &nodes, client.MatchingLabels{syncer.LabelManagedBy: syncer.ManagedByValue}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("reading the tenant's virtual nodes: %w", err)
	}
	return nodes.Items, nil
}

// newest is cluster's newest registered view; false when it has none.
func (v *nodeViews) newest(cluster string) (nodeView, bool) {
	// Taken under the lock: unregister deletes in place.
	v.mu.Lock()
	defer v.mu.Unlock()
	views := v.byCluster[cluster]
	if len(views) == 0 {
		return nodeView{}, false
	}
	return views[len(views)-1], true
}

// hostNode reads the host node name through cluster's newest view; nil
// when the host has no such node, or cluster no view.
func (v *nodeViews) hostNode(cluster, name string) (*corev1.Node, error) {
	view, ok := v.newest(cluster)
	if !ok || view.host == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeReadTimeout)
	defer cancel()
	var node corev1.Node
	if err := view.host.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading host node %s: %w", name, err)
	}
	return &node, nil
}

// nodesFor are cluster's virtual nodes for placing a Pod of spec; none,
// without a read, when the Pod asks nothing of node labels: most Pods, and
// a patrol round builds every Pod's copy.
func (v *nodeViews) nodesFor(cluster string, spec *corev1.PodSpec) ([]corev1.Node, error) {
	a := spec.Affinity
	asks := len(spec.NodeSelector) > 0 || a != nil && a.NodeAffinity != nil &&
		(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil || len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0)
	if !asks || spec.NodeName != "" {
		return nil, nil
	}
	return v.virtualNodesOf(cluster)
}

// place resolves, in spec (a tenant Pod's, before the host policy), what
// the Pod asks of its node by the tenant's own labels against nodes, the
// tenant's virtual nodes: the node selector's and the required node
// affinity's terms go, for a required node affinity naming the nodes that
// fit, and preferred terms on the tenant's labels become preferences for
// the nodes they name. A Pod that asks nothing of the tenant's own labels,
// or that no node fits, is left as it is.
func place(spec *corev1.PodSpec, nodes []corev1.Node) {
	own := map[string]bool{}
	for i := range nodes {
		for k := range ownLabels(&nodes[i]) {
			own[k] = true
		}
	}
	if len(own) == 0 || spec.NodeName != "" {
		return
	}
	var required *corev1.NodeSelector
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil {
		required = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	asks := slices.ContainsFunc(slices.Collect(maps.Keys(spec.NodeSelector)), func(k string) bool { return own[k] })
	if required != nil {
		for _, term := range required.NodeSelectorTerms {
			asks = asks || namesOwn(term, own)
		}
	}
	if !asks {
		placePreferred(spec, nodes, own)
		return
	}
	var fit []string
	for i := range nodes {
		n := &nodes[i]
		if selects(spec, n) && tolerated(spec.Tolerations, n.Spec.Taints) {
			fit = append(fit, n.Name)
		}
	}
	if len(fit) == 0 {
		return // no node fits: the host's scheduler says so
	}
	slices.Sort(fit)
	maps.DeleteFunc(spec.NodeSelector, func(k, _ string) bool { return own[k] })
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: nodeTerms(fit)}
	placePreferred(spec, nodes, own)
}

// placePreferred turns each preferred node affinity term of spec that
// names the tenant's own labels into preferences, of the same weight, for
// the nodes it matches.
func placePreferred(spec *corev1.PodSpec, nodes []corev1.Node, own map[string]bool) {
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil {
		return
	}
	var out []corev1.PreferredSchedulingTerm
	for _, p := range spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		if !namesOwn(p.Preference, own) {
			out = append(out, p)
			continue
		}
		for i := range nodes {
			if termMatches(p.Preference, &nodes[i]) {
				out = append(out, corev1.PreferredSchedulingTerm{Weight: p.Weight, Preference: nodeTerms([]string{nodes[i].Name})[0]})
			}
		}
	}
	spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = out
}

// nodeTerms are node selector terms, ORed, for nodes by name: one term per
// node, as a field requirement on metadata.name takes one value.
func nodeTerms(names []string) []corev1.NodeSelectorTerm {
	terms := make([]corev1.NodeSelectorTerm, 0, len(names))
	for _, name := range names {
		terms = append(terms, corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: metav1ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{name},
		}}})
	}
	return terms
}

// A Pod the tenant binds to a node by name (spec.nodeName) skips its
// scheduler, as on any cluster: the node's kubelet alone admits or refuses
// it, and a refusal (its ports taken, its resources short) ends the Pod
// Failed, for its controller to make it again. Its host copy is pinned to
// that node (pin), so that the host's scheduler places it there or
// nowhere; and, where the host's scheduler could have put it there
// itself (bindable), it is created bound to the node by name as well
// (bindByName, the Pod syncer's Prefer), for the host's kubelet to judge
// and to say so in its status, which goes up as always. A host that
// refuses the bound copy (a webhook of the host's added scheduling gates,
// say) gets the pinned one.

// bindable says whether the host copy of a Pod the tenant bound by name
// to node may be created bound to it, past the host's scheduler: spec,
// the host Pod's after the host policy, names the default scheduler and
// no scheduling gate, and the host's scheduler could place it on node, as
// far as the node itself decides: it exists and is not going, is not
// cordoned, matches the Pod's node selector and required node affinity
// (the host policy's node selector among them), and has no NoSchedule or
// NoExecute taint the Pod does not tolerate (those of its conditions, not
// ready or under pressure, included). Resources and ports are the
// kubelet's to judge as it admits the Pod.
func bindable(spec *corev1.PodSpec, node *corev1.Node) bool {
	if node == nil || !node.DeletionTimestamp.IsZero() || node.Spec.Unschedulable ||
		spec.SchedulerName != "" && spec.SchedulerName != corev1.DefaultSchedulerName || len(spec.SchedulingGates) > 0 {
		return false
	}
	return selects(spec, node) && !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return keepsOff(spec.Tolerations, &t) })
}

// selects says whether spec's node selector and required node affinity
// (one of its terms, ORed) both hold of node, as the scheduler reads them.
func selects(spec *corev1.PodSpec, node *corev1.Node) bool {
	if !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	return slices.ContainsFunc(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, func(t corev1.NodeSelectorTerm) bool { return termMatches(t, node) })
}

// bindByName binds host, the new host copy of tenant, to the node that
// tenant was bound to by name, if node (that host node, nil if the host
// has none) is bindable, and says whether it did.
func bindByName(tenant, host *corev1.Pod, node *corev1.Node) bool {
	if tenant.Spec.NodeName == "" || host.ResourceVersion != "" || node == nil || node.Name != tenant.Spec.NodeName || !bindable(&host.Spec, node) {
		return false
	}
	host.Spec.NodeName = tenant.Spec.NodeName
	return true
}

// pin keeps a Pod that the tenant bound to a node by name on that node in
// the host: a required node affinity to it, added to each of the Pod's own
// required terms (they are ORed), so that the host's scheduler places it
// there or nowhere, with the host's taints and policy still in force.
// Without it the host would place it wherever it fits, and the tenant
// would see it run on the node it named while it ran on another.
func pin(spec *corev1.PodSpec, node string) {
	field := corev1.NodeSelectorRequirement{Key: metav1ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	required := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if required == nil || len(required.NodeSelectorTerms) == 0 {
		spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: nodeTerms([]string{node})}
		return
	}
	for i := range required.NodeSelectorTerms {
		required.NodeSelectorTerms[i].MatchFields = append(required.NodeSelectorTerms[i].MatchFields, field)
	}
}

// metav1ObjectNameField is the one field a node selector term can match.
const metav1ObjectNameField = "metadata.name"

// namesOwn says whether term asks anything of a label in own.
func namesOwn(term corev1.NodeSelectorTerm, own map[string]bool) bool {
	return slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool { return own[r.Key] })
}

// termMatches says whether node fits term, as the scheduler reads it: all
// its requirements hold, and a term with none matches no node.
func termMatches(term corev1.NodeSelectorTerm, node *corev1.Node) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	for _, r := range term.MatchExpressions {
		if !requirementHolds(r, labels.Set(node.Labels)) {
			return false
		}
	}
	for _, r := range term.MatchFields {
		if r.Key != metav1ObjectNameField || !requirementHolds(r, labels.Set{metav1ObjectNameField: node.Name}) {
			return false
		}
	}
	return true
}

// conditionTaintPrefix is the prefix of the taints Kubernetes sets from a
// node's conditions.
const conditionTaintPrefix = "node.kubernetes.io/"

// nodeOperators are the label selection operators of node selector
// requirements.
var nodeOperators = map[corev1.NodeSelectorOperator]selection.Operator{
	corev1.NodeSelectorOpIn: selection.In, corev1.NodeSelectorOpNotIn: selection.NotIn,
	corev1.NodeSelectorOpExists: selection.Exists, corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	corev1.NodeSelectorOpGt: selection.GreaterThan, corev1.NodeSelectorOpLt: selection.LessThan,
}

// requirementHolds says whether r holds of set; a requirement that is not
// valid holds of nothing.
func requirementHolds(r corev1.NodeSelectorRequirement, set labels.Set) bool {
	op, ok := nodeOperators[r.Operator]
	if !ok {
		return false
	}
	req, err := labels.NewRequirement(r.Key, op, r.Values)
	return err == nil && req.Matches(set)
}

// tolerated says whether tolerations tolerate every taint of taints that
// keeps a Pod off a node (NoSchedule, NoExecute), but for the taints of a
// node's conditions (node.kubernetes.io/: not-ready, unreachable, memory
// pressure, ...), which the tenant's node lifecycle controller sets from
// the host node's conditions as it sees them: whether the host node is
// fit is the host scheduler's to judge, by the host's own.
func tolerated(tolerations []corev1.Toleration, taints []corev1.Taint) bool {
	return !slices.ContainsFunc(taints, func(t corev1.Taint) bool {
		return !strings.HasPrefix(t.Key, conditionTaintPrefix) && keepsOff(tolerations, &t)
	})
}

// keepsOff says whether taint keeps a Pod of tolerations off its node: it
// is NoSchedule or NoExecute, and no toleration tolerates it.
func keepsOff(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	if taint.Effect != corev1.TaintEffectNoSchedule && taint.Effect != corev1.TaintEffectNoExecute {
		return false
	}
	return !slices.ContainsFunc(tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(logr.Discard(), taint, false) })
}
