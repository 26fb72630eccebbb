package pods

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// NodeHeartbeat renews the Leases of tenants' virtual nodes from outside
// their apps, as long as it is told to keep a tenant: while its
// VirtualCluster is paused, and from the moment a manager takes it up,
// before its app has started (at 1,000 tenants, minutes). Without it a
// tenant's node lifecycle controller would mark the nodes of a tenant
// whose app does not run Unknown after 50 seconds, and evict their Pods
// after 5 minutes, as on a cluster whose kubelets all died.
//
// It renews, every nodeLeaseRenewInterval, each Lease of a virtual node
// (Tenantry's label) whose host node exists, and creates none: a tenant's
// app makes them with its virtual nodes. A Lease renewed less than half an
// interval ago, by the app, say, is left as is. While a tenant's app
// runs, the app renews its Leases itself, and the heartbeat sends that
// tenant no request at all (see NodeHeartbeatOptions.AppRuns). It is a
// manager.Runnable; Keep and Forget are safe for concurrent use.
type NodeHeartbeat struct {
	// hostNodes reads host nodes (the Hub's cache).
	hostNodes client.Reader
	log       logr.Logger
	appRuns   func(cluster string) bool

	mu      sync.Mutex
	root    context.Context // ends when Start's context does
	stop    context.CancelFunc
	tenants map[string]*heartbeatTenant
	wg      sync.WaitGroup
}

type heartbeatTenant struct {
	revision string
	cancel   context.CancelFunc
}

// NodeHeartbeatOptions are what a NodeHeartbeat needs.
type NodeHeartbeatOptions struct {
	// HostNodes reads host nodes (see syncer.Hub.Reader).
	HostNodes client.Reader
	Log       logr.Logger
	// AppRuns says whether the app of tenant cluster is running, its
	// virtual nodes' controller renewing their Leases: while it does, the
	// heartbeat leaves the tenant alone. Asked before every renewal; nil
	// means never, so that every kept tenant is renewed.
	AppRuns func(cluster string) bool
}

// NewNodeHeartbeat builds a NodeHeartbeat.
func NewNodeHeartbeat(o NodeHeartbeatOptions) *NodeHeartbeat {
	root, stop := context.WithCancel(context.Background())
	appRuns := o.AppRuns
	if appRuns == nil {
		appRuns = func(string) bool { return false }
	}
	return &NodeHeartbeat{hostNodes: o.HostNodes, log: o.Log, appRuns: appRuns, root: root, stop: stop, tenants: map[string]*heartbeatTenant{}}
}

// Keep renews the virtual nodes' Leases of tenant cluster name, reached
// with config, at once and then every interval, until Forget. revision
// names config (a digest of the kubeconfig, say): keeping a tenant kept
// already at the same revision changes nothing.
func (h *NodeHeartbeat) Keep(name, revision string, config *rest.Config) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.tenants[name]; ok {
		if t.revision == revision {
			return nil
		}
		t.cancel()
		delete(h.tenants, name)
	}
	if h.root.Err() != nil {
		return nil // stopped: the manager goes
	}
	leases, err := coordinationclient.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("a client for cluster %s's node Leases: %w", name, err)
	}
	ctx, cancel := context.WithCancel(h.root)
	h.tenants[name] = &heartbeatTenant{revision: revision, cancel: cancel}
	h.wg.Go(func() { h.run(ctx, name, leases.Leases(nodeLeaseNamespace)) })
	return nil
}

// Kept says whether tenant cluster name is kept.
func (h *NodeHeartbeat) Kept(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.tenants[name]
	return ok
}

// Forget stops renewing tenant cluster name's Leases.
func (h *NodeHeartbeat) Forget(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.tenants[name]; ok {
		t.cancel()
		delete(h.tenants, name)
	}
}

// Start runs until ctx ends, then stops every tenant's renewals and waits
// for them.
func (h *NodeHeartbeat) Start(ctx context.Context) error {
	<-ctx.Done()
	h.mu.Lock()
	h.stop()
	h.tenants = map[string]*heartbeatTenant{}
	h.mu.Unlock()
	h.wg.Wait()
	return nil
}

// NeedLeaderElection: every replica renews the tenants it runs.
func (h *NodeHeartbeat) NeedLeaderElection() bool { return false }

// run renews one tenant's Leases until ctx ends.
func (h *NodeHeartbeat) run(ctx context.Context, name string, leases coordinationclient.LeaseInterface) {
	log := h.log.WithValues("cluster", name)
	tick := time.NewTicker(nodeLeaseRenewInterval)
	defer tick.Stop()
	for {
		// While the app runs, it renews them: listing them too would cost
		// the tenant API server a request every interval for nothing.
		if !h.appRuns(name) {
			if err := h.renew(ctx, leases); err != nil && ctx.Err() == nil {
				log.V(1).Info("cannot renew the virtual nodes' Leases yet", "error", err.Error())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renew renews, once, the Leases of a tenant's virtual nodes whose host
// node exists.
func (h *NodeHeartbeat) renew(ctx context.Context, leases coordinationclient.LeaseInterface) error {
	list, err := leases.List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{syncer.LabelManagedBy: syncer.ManagedByValue}).String(),
	})
	if err != nil {
		return fmt.Errorf("listing the virtual nodes' Leases: %w", err)
	}
	var errs []error
	for i := range list.Items {
		lease := &list.Items[i]
		if lease.Spec.RenewTime != nil && time.Since(lease.Spec.RenewTime.Time) < nodeLeaseRenewInterval/2 {
			continue
		}
		if err := h.hostNodes.Get(ctx, client.ObjectKey{Name: lease.Name}, &corev1.Node{}); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("reading host node %s: %w", lease.Name, err))
			}
			continue // its virtual node goes with it
		}
		renewLease(lease, lease.Name)
		if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("renewing virtual node %s's Lease: %w", lease.Name, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d Leases: %w", len(errs), len(list.Items), errs[0])
	}
	return nil
}

// renewLease makes lease the renewed Lease of virtual node node.
func renewLease(lease *coordinationv1.Lease, node string) {
	lease.Spec.HolderIdentity = ptr.To(node)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(nodeLeaseDuration / time.Second))
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
}
