package virtualcluster

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/sharding"
	"github.com/tenantry/tenantry/pkg/syncer"
)

// stopTimeout bounds stopping a tenant cluster's app from a reconcile.
const stopTimeout = time.Minute

// Reconciler keeps the cluster registry in step with VirtualClusters: a
// tenant cluster's app runs exactly while its VirtualCluster exists, is not
// paused, and has a usable kubeconfig.
type Reconciler struct {
	// Client reads VirtualClusters (cached) and writes them.
	Client client.Client
	// APIReader reads from the API server, uncached: kubeconfig Secrets
	// (so that no informer holds every Secret's contents; a Secret is read
	// again only when Client's metadata of it shows a new version) and, at
	// deletion, the cluster's host namespaces.
	APIReader client.Reader
	// Registry runs the tenant clusters' apps.
	Registry *clusterregistry.RemoteClusterRegistry
	// Recorder records Events on VirtualClusters.
	Recorder events.EventRecorder
	// TenantQPS and TenantBurst limit Tenantry's requests to each tenant
	// API server, where its kubeconfig sets no limit; zero: the defaults.
	TenantQPS   float64
	TenantBurst int
	// Shards, if set, shares the VirtualClusters among replicas: this one
	// reconciles only those it owns and holds the Lease of, and hands over
	// those that move to another replica. Nil: this replica runs them all.
	Shards *sharding.Coordinator
	// Fence, if set, is asked before each of the reconciler's own writes
	// for a VirtualCluster (with Shards: the fence on its Lease).
	Fence clusterregistry.Fence
	// Replica names this replica in the VirtualClusters' status.replica.
	Replica string
	// Nodes, if set, keeps the virtual nodes of the clusters this replica
	// runs alive while their apps do not run: paused, or not started yet.
	Nodes NodeKeeper

	// secrets are the kubeconfig Secrets read, by version.
	secrets kubeconfigSecrets

	mu sync.Mutex
	// spawnedFrom is the digest of the kubeconfig each running cluster was
	// spawned from, to tell a rotated Secret from an unchanged one.
	spawnedFrom map[string][sha256.Size]byte
	// superseded holds, per VirtualCluster, the resourceVersions that the
	// reconciler's own writes of it replaced since the cache last caught
	// up: a VirtualCluster read at one of them comes from a cache that has
	// not seen those writes yet.
	superseded map[string][]string
	// hostUID is the host's kube-system namespace UID, once read.
	hostUIDMu sync.Mutex
	hostUID   types.UID
}

// NodeKeeper renews the virtual nodes' Leases of tenant clusters from
// outside their apps (pods.NodeHeartbeat).
type NodeKeeper interface {
	// Keep renews cluster name's Leases until Forget; revision names
	// config.
	Keep(name, revision string, config *rest.Config) error
	// Kept says whether cluster name is kept.
	Kept(name string) bool
	// Forget stops renewing cluster name's Leases.
	Forget(name string)
}

// readiness is what a reconcile found out: the Ready condition to report,
// and whether to retry with backoff.
type readiness struct {
	status  metav1.ConditionStatus
	reason  string
	message string
	retry   error
	event   string // eventtype when the outcome deserves an event beyond a transition
	action  string
	// transient: the kubeconfig could not be read this time, which says
	// nothing about it (see loadKubeconfig).
	transient bool
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	name := req.Name
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", name)
	ctx = ctrl.LoggerInto(ctx, log)

	var vc tenantryv1alpha1.VirtualCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &vc); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without our finalizer (it was never added, or removed by
			// hand): make sure nothing of it runs.
			r.forget(name)
			if err := r.stop(ctx, name); err != nil {
				return ctrl.Result{}, err
			}
			r.Registry.Forget(name)
			if err := r.removeLease(ctx, name); err != nil {
				return ctrl.Result{}, err
			}
			return r.removeOrphanLease(ctx, name)
		}
		return ctrl.Result{}, fmt.Errorf("reading VirtualCluster %s: %w", name, err)
	}
	if r.behindOwnWrites(&vc) {
		// Acting on it would write again what was written (and tell its
		// Event twice); the watch event of those writes brings it back.
		return ctrl.Result{RequeueAfter: ownWritesRecheck}, nil
	}
	if r.Shards != nil {
		if res, runsHere, err := r.claim(ctx, &vc); !runsHere {
			r.forget(name)
			return res, err
		}
	}

	if !vc.DeletionTimestamp.IsZero() {
		r.forget(name)
		return ctrl.Result{}, r.finalize(ctx, &vc)
	}
	// Read once: the node heartbeat and the registry both start from it
	// (a paused cluster's only for the heartbeat).
	var kc kubeconfig
	if r.Nodes != nil || !vc.Spec.Paused {
		kc = r.readKubeconfig(ctx, &vc)
	}
	if r.keepNodes(ctx, &vc, kc) {
		// Taken up a moment ago: every cluster's nodes are kept alive
		// before any of them spawns (at 1,000 clusters, minutes).
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	if !controllerutil.ContainsFinalizer(&vc, tenantryv1alpha1.Finalizer) {
		if err := r.fenced(name); err != nil {
			return ctrl.Result{}, err
		}
		patch := client.MergeFrom(vc.DeepCopy())
		controllerutil.AddFinalizer(&vc, tenantryv1alpha1.Finalizer)
		read := vc.ResourceVersion
		if err := r.Client.Patch(ctx, &vc, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer to %s: %w", name, err)
		}
		r.wrote(name, read)
	}

	outcome := r.reconcileCluster(ctx, &vc, kc)
	if errors.Is(outcome.retry, clusterregistry.ErrClosed) {
		return ctrl.Result{}, nil // shutting down: leave the status as it is
	}
	if err := r.updateStatus(ctx, &vc, outcome); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, outcome.retry
}

// reconcileCluster brings the registry in line with vc's spec, and kc,
// the kubeconfig it names.
func (r *Reconciler) reconcileCluster(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, kc kubeconfig) readiness {
	name := vc.Name
	if vc.Spec.Paused {
		if err := r.stop(ctx, name); err != nil {
			return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Stopping the paused cluster: %v", err), err)
		}
		return readiness{status: metav1.ConditionFalse, reason: tenantryv1alpha1.ReasonPaused,
			message: "Syncing is paused; nothing was deleted."}
	}

	config, digest, bad := kc.config, kc.digest, kc.bad
	if bad != nil && bad.transient {
		// A running cluster keeps running on the kubeconfig it has; one
		// that does not run starts once the Secret can be read.
		if status, err := r.Registry.Status(name); err == nil && status.State == clusterregistry.StateRunning {
			out := ready()
			out.message = fmt.Sprintf("The tenant cluster's controllers are running; reading its kubeconfig Secret failed for now (%v), retrying.", bad.retry)
			out.retry = bad.retry
			return out
		}
		return *bad
	}
	if bad != nil {
		// Without a usable kubeconfig the cluster cannot be (re)started, so
		// it does not run: what runs always matches what the spec says.
		if err := r.stop(ctx, name); err != nil {
			bad.retry = errors.Join(bad.retry, err)
		}
		return *bad
	}

	status, err := r.Registry.Status(name)
	switch {
	case err == nil && status.State == clusterregistry.StateRunning && r.digest(name) == digest:
		return ready()
	case err == nil && (status.State == clusterregistry.StateStarting || status.State == clusterregistry.StateStopping):
		return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Cluster is %s; will retry.", status.State),
			fmt.Errorf("cluster %s is %s", name, status.State))
	}

	if host, err := r.reachesHost(ctx, config); errors.Is(err, clusterregistry.ErrUnreachable) {
		return notReady(tenantryv1alpha1.ReasonUnreachable, fmt.Sprintf("The tenant API server did not answer: %v", err), err)
	} else if err != nil {
		return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Telling the tenant cluster from the host: %v", err), err)
	} else if host {
		if err := r.stop(ctx, name); err != nil {
			return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Stopping the cluster: %v", err), err)
		}
		return notReady(tenantryv1alpha1.ReasonHostCluster,
			"The kubeconfig reaches the management cluster itself: syncing it would copy Tenantry's own copies without end, so nothing runs. Point it at the tenant cluster.", nil)
	}

	action := "Spawn"
	if err == nil {
		// Running from another kubeconfig, or failed: start afresh.
		action = "Respawn"
		why := "the kubeconfig Secret or spec.inClusterServer changed"
		if status.State == clusterregistry.StateFailed {
			why = fmt.Sprintf("it failed: %v", status.Err)
		}
		ctrl.LoggerFrom(ctx).Info("re-spawning cluster", "because", why)
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "Respawning", action, "Re-spawning the cluster because %s", why)
		if err := r.stop(ctx, name); err != nil {
			return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Stopping the cluster before re-spawning it: %v", err), err)
		}
	}

	if err := r.Registry.Spawn(name, config); err != nil {
		switch {
		case errors.Is(err, clusterregistry.ErrClosed):
			return readiness{retry: err}
		case errors.Is(err, clusterregistry.ErrUnreachable):
			return notReady(tenantryv1alpha1.ReasonUnreachable, fmt.Sprintf("The tenant API server did not answer: %v", err), err)
		case errors.Is(err, clusterregistry.ErrCacheLimit):
			return notReady(tenantryv1alpha1.ReasonCacheLimitExceeded, fmt.Sprintf(
				"The tenant cluster holds more than the manager may hold of it (spec.hostPolicy.cache), so it is not synced; retrying with backoff, and at once when the policy changes: %v", err), err)
		default:
			return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Starting the cluster's controllers failed: %v", err), err)
		}
	}
	r.setDigest(name, digest)
	out := ready()
	out.event, out.action = corev1.EventTypeNormal, action
	return out
}

// kubeconfig is what loadKubeconfig found: a config and its digest, or
// why not.
type kubeconfig struct {
	config *rest.Config
	digest [sha256.Size]byte
	bad    *readiness
}

// readKubeconfig is loadKubeconfig's outcome as one value.
func (r *Reconciler) readKubeconfig(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) kubeconfig {
	config, digest, bad := r.loadKubeconfig(ctx, vc)
	return kubeconfig{config: config, digest: digest, bad: bad}
}

// loadKubeconfig reads and checks the kubeconfig that vc points at. A
// problem comes back as the readiness to report.
func (r *Reconciler) loadKubeconfig(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) (*rest.Config, [sha256.Size]byte, *readiness) {
	ref := vc.Spec.KubeconfigSecretRef
	key := ref.KubeconfigKey()
	secret, err := r.secrets.get(ctx, r.Client, r.APIReader, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name})
	if err != nil {
		if apierrors.IsNotFound(err) {
			msg := fmt.Sprintf("Secret %s/%s does not exist.", ref.Namespace, ref.Name)
			out := notReady(tenantryv1alpha1.ReasonSecretNotFound, msg, errors.New(msg))
			return nil, [sha256.Size]byte{}, &out
		}
		out := notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Reading Secret %s/%s: %v", ref.Namespace, ref.Name, err),
			fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err))
		// Any failure but NotFound says nothing about the kubeconfig: a
		// host that throttles, times out or restarts, or a lapse in the
		// manager's own rights (Forbidden, Unauthorized) must not stop
		// every running tenant.
		out.transient = true
		return nil, [sha256.Size]byte{}, &out
	}
	data, ok := secret.Data[key]
	if !ok || len(data) == 0 {
		msg := fmt.Sprintf("Secret %s/%s has no data under key %q.", ref.Namespace, ref.Name, key)
		out := notReady(tenantryv1alpha1.ReasonSecretKeyNotFound, msg, errors.New(msg))
		return nil, [sha256.Size]byte{}, &out
	}
	config, err := r.secrets.config(secret, key)
	if err != nil {
		msg := fmt.Sprintf("Secret %s/%s key %q: %v", ref.Namespace, ref.Name, key, err)
		out := notReady(tenantryv1alpha1.ReasonInvalidKubeconfig, msg, errors.New(msg))
		return nil, [sha256.Size]byte{}, &out
	}
	r.limit(config)
	// The digest covers what the cluster's app is built from: the
	// kubeconfig, where its Pods reach it, its host policy and which nodes
	// it sees (only when All, so that a digest taken before nodeSync
	// existed stays the same).
	policy, err := json.Marshal(vc.Spec.HostPolicy)
	if err != nil {
		out := notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Reading spec.hostPolicy: %v", err), fmt.Errorf("encoding spec.hostPolicy: %w", err))
		return nil, [sha256.Size]byte{}, &out
	}
	h := sha256.New()
	h.Write(data)
	h.Write([]byte{0})
	h.Write([]byte(vc.Spec.InClusterServer))
	h.Write([]byte{0})
	h.Write(policy)
	if vc.Spec.NodeSync == tenantryv1alpha1.NodeSyncAll {
		h.Write([]byte{0})
		h.Write([]byte(vc.Spec.NodeSync))
	}
	var digest [sha256.Size]byte
	h.Sum(digest[:0])
	return config, digest, nil
}

// limit sets the client-side limit of config, a tenant's: one token
// bucket for every client built from it (without one, each resource
// type's REST client would get a bucket of its own).
func (r *Reconciler) limit(config *rest.Config) {
	if config.QPS == 0 {
		config.QPS = float32(cmp.Or(r.TenantQPS, DefaultTenantQPS))
	}
	if config.Burst == 0 {
		config.Burst = cmp.Or(r.TenantBurst, DefaultTenantBurst)
	}
	if config.RateLimiter == nil {
		config.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(config.QPS, config.Burst)
	}
}

// reachesHost says whether config reaches the management cluster itself:
// both answer with the same kube-system namespace, the UID that names a
// cluster. It fails closed: a tenant that does not answer is an error
// wrapping clusterregistry.ErrUnreachable, and one that answers with an
// error (throttled, failing, refusing to say: Tenantry needs far more
// rights in a tenant than reading kube-system) is an error too, so that
// nothing is spawned on a kubeconfig not known to be a tenant's. Only a
// cluster without kube-system is not the host for sure.
func (r *Reconciler) reachesHost(ctx context.Context, config *rest.Config) (bool, error) {
	hostID, err := r.hostID(ctx)
	if err != nil {
		return false, err
	}
	cfg := rest.CopyConfig(config)
	cfg.Timeout = clusterIDTimeout
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("tenant client: %w", err)
	}
	ns, err := tenant.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	var status apierrors.APIStatus
	switch {
	case apierrors.IsNotFound(err):
		return false, nil // the host has one
	case err != nil && !errors.As(err, &status):
		return false, fmt.Errorf("%w: reading its kube-system namespace, to tell it from the host: %w", clusterregistry.ErrUnreachable, err)
	case err != nil:
		return false, fmt.Errorf("reading the tenant's kube-system namespace, to tell the tenant from the host: %w", err)
	}
	return ns.UID == hostID, nil
}

// clusterIDTimeout bounds the tenant request that tells it from the host.
const clusterIDTimeout = 10 * time.Second

// hostID is the UID of the host's kube-system namespace, read once.
func (r *Reconciler) hostID(ctx context.Context) (types.UID, error) {
	r.hostUIDMu.Lock()
	defer r.hostUIDMu.Unlock()
	if r.hostUID != "" {
		return r.hostUID, nil
	}
	var ns corev1.Namespace
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, &ns); err != nil {
		return "", fmt.Errorf("reading the host's kube-system namespace: %w", err)
	}
	r.hostUID = ns.UID
	return r.hostUID, nil
}

// finalize stops the cluster's app and lets the VirtualCluster go.
func (r *Reconciler) finalize(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) error {
	if !controllerutil.ContainsFinalizer(vc, tenantryv1alpha1.Finalizer) {
		return nil
	}
	if err := r.stop(ctx, vc.Name); err != nil {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "StopFailed", "Stop", "Stopping the cluster's controllers failed: %v", err)
		return err
	}
	if err := r.fenced(vc.Name); err != nil {
		return err
	}
	if err := r.deleteHostNamespaces(ctx, vc); err != nil {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "CleanupFailed", "Delete", "Deleting the cluster's host namespaces failed: %v", err)
		return err
	}
	// Before the finalizer goes, so that no Lease outlives its
	// VirtualCluster.
	if err := r.removeLease(ctx, vc.Name); err != nil {
		return err
	}
	// The Lease is gone: a replica that takes it anew finalizes again,
	// which is idempotent.
	patch := client.MergeFrom(vc.DeepCopy())
	controllerutil.RemoveFinalizer(vc, tenantryv1alpha1.Finalizer)
	if err := r.Client.Patch(ctx, vc, patch); err != nil {
		return fmt.Errorf("removing finalizer from %s: %w", vc.Name, client.IgnoreNotFound(err))
	}
	ctrl.LoggerFrom(ctx).Info("cluster stopped for deletion")
	return nil
}

// deleteHostNamespaces deletes the host namespaces that Tenantry made for
// the cluster, and with them every copy in them: with the VirtualCluster
// gone, nothing would keep them in step. Only namespaces carrying both of
// Tenantry's labels for this cluster, and named as Tenantry names the host
// namespace of the tenant namespace they record, are touched; the tenant
// keeps all its objects.
func (r *Reconciler) deleteHostNamespaces(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) error {
	var list corev1.NamespaceList
	if err := r.APIReader.List(ctx, &list, client.MatchingLabels{
		syncer.LabelManagedBy: syncer.ManagedByValue,
		syncer.LabelCluster:   vc.Name,
	}); err != nil {
		return fmt.Errorf("listing host namespaces of %s: %w", vc.Name, err)
	}
	deleted := 0
	for i := range list.Items {
		ns := &list.Items[i]
		if !ns.DeletionTimestamp.IsZero() {
			continue
		}
		if tenantNS, ok := ns.Annotations[syncer.AnnotationTenantName]; !ok || ns.Name != syncer.HostNamespace(vc.Name, tenantNS) {
			// Labelled as Tenantry's, and not where Tenantry puts this
			// cluster's namespaces: someone copied the labels onto a
			// namespace of theirs. It is not deleted.
			ctrl.LoggerFrom(ctx).Info("leaving alone a namespace that carries the cluster's labels but is not one of its host namespaces", "namespace", ns.Name)
			continue
		}
		if err := r.Client.Delete(ctx, ns, client.Preconditions{UID: &ns.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting host namespace %s: %w", ns.Name, err)
		}
		deleted++
	}
	if deleted > 0 {
		ctrl.LoggerFrom(ctx).Info("deleting the cluster's host namespaces", "count", deleted)
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "HostCleanup", "Delete", "Deleting %d host namespaces of the cluster", deleted)
	}
	return nil
}

// handoverPoll is how often a replica that owns a VirtualCluster tries to
// take its Lease while the previous owner still holds it.
const handoverPoll = time.Second

// claim says whether this replica runs vc: it owns vc among the live
// replicas and holds its Lease. A VirtualCluster owned by another replica
// is stopped here, if it ran here, then its Lease is given up, so that its
// new owner takes it at once.
func (r *Reconciler) claim(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) (ctrl.Result, bool, error) {
	name := vc.Name
	switch owner := r.Shards.Owner(name); owner {
	case "":
		// The live replicas are not known yet, or this one is lost; a
		// change of the live replicas queues every VirtualCluster again.
		return ctrl.Result{}, false, nil
	case r.Shards.Identity():
	default:
		return ctrl.Result{}, false, r.handOver(ctx, vc, owner)
	}
	held, err := r.Shards.Acquire(ctx, name)
	if err != nil {
		return ctrl.Result{}, false, fmt.Errorf("VirtualCluster %s: %w", name, err)
	}
	if !held {
		// The previous owner still runs it: it gives the Lease up once it
		// has stopped the cluster, or loses it once its own Lease runs out.
		ctrl.LoggerFrom(ctx).V(1).Info("waiting for the previous owner to hand the cluster over")
		return ctrl.Result{RequeueAfter: handoverPoll}, false, nil
	}
	return ctrl.Result{}, true, nil
}

// handOver stops vc's cluster if it runs here and gives its Lease up, if
// this replica took it, for owner to take.
func (r *Reconciler) handOver(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, owner string) error {
	_, err := r.Registry.Status(vc.Name)
	running := err == nil
	if running {
		ctrl.LoggerFrom(ctx).Info("handing the cluster over to the replica that owns it now", "owner", owner)
		if err := r.stop(ctx, vc.Name); err != nil {
			return err
		}
	}
	if err := r.Shards.Release(ctx, vc.Name); err != nil {
		return fmt.Errorf("handing VirtualCluster %s over: %w", vc.Name, err)
	}
	if running {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "HandedOver", "Stop",
			"Replica %s stopped the cluster's controllers and handed it over to replica %s", r.Replica, owner)
	}
	return nil
}

// removeLease deletes the Lease of a VirtualCluster that is gone, if this
// replica took it.
func (r *Reconciler) removeLease(ctx context.Context, name string) error {
	if r.Shards == nil {
		return nil
	}
	if err := r.Shards.Remove(ctx, name); err != nil {
		return fmt.Errorf("VirtualCluster %s: %w", name, err)
	}
	return nil
}

// removeOrphanLease deletes the Lease of a VirtualCluster that is gone
// (deleted without its finalizer, say) while a replica that died held it:
// the replica that owns the name takes the Lease, as from any dead holder,
// and deletes it. While a live replica holds it, that replica deletes it
// itself; this one looks again until it is gone.
func (r *Reconciler) removeOrphanLease(ctx context.Context, name string) (ctrl.Result, error) {
	if r.Shards == nil || r.Shards.Owner(name) != r.Shards.Identity() {
		return ctrl.Result{}, nil
	}
	held, err := r.Shards.Acquire(ctx, name)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("VirtualCluster %s is gone; taking its Lease to delete it: %w", name, err)
	}
	if !held {
		return ctrl.Result{RequeueAfter: handoverPoll}, nil
	}
	return ctrl.Result{}, r.removeLease(ctx, name)
}

// fenced is an error once this replica may no longer write for the
// VirtualCluster name (another replica may run it now): each of the
// reconciler's own writes for it asks first.
func (r *Reconciler) fenced(name string) error {
	if r.Fence == nil {
		return nil
	}
	return r.Fence(name)
}

// keepNodes has Nodes keep vc's virtual nodes alive, paused or not, from
// its kubeconfig: it says whether it has just taken vc up, while vc's app
// does not run yet. Without a usable kubeconfig there is nothing to keep.
func (r *Reconciler) keepNodes(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, kc kubeconfig) (takenUp bool) {
	if r.Nodes == nil {
		return false
	}
	config, digest, bad := kc.config, kc.digest, kc.bad
	switch {
	case bad != nil && bad.transient:
		return false // what runs keeps running; the reconcile tells the rest
	case bad != nil:
		r.Nodes.Forget(vc.Name)
		return false
	}
	kept := r.Nodes.Kept(vc.Name)
	if err := r.Nodes.Keep(vc.Name, fmt.Sprintf("%x", digest), config); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "cannot keep the cluster's virtual nodes alive")
		return false
	}
	_, err := r.Registry.Status(vc.Name)
	return !kept && !vc.Spec.Paused && errors.Is(err, clusterregistry.ErrNotExist)
}

// forget stops keeping cluster name's virtual nodes alive, and takes
// its Ready series off this replica's metrics: it is gone, being deleted,
// or another replica runs it.
func (r *Reconciler) forget(name string) {
	forgetReady(name)
	r.mu.Lock()
	delete(r.superseded, name)
	r.mu.Unlock()
	if r.Nodes != nil {
		r.Nodes.Forget(name)
	}
}

// stop stops the cluster's app if it runs or failed; a cluster that is not
// in the registry is already stopped.
func (r *Reconciler) stop(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	err := r.Registry.Stop(ctx, name)
	if errors.Is(err, clusterregistry.ErrNotExist) {
		err = nil
	}
	if err == nil {
		r.setDigest(name, [sha256.Size]byte{})
		return nil
	}
	return fmt.Errorf("stopping cluster %s: %w", name, err)
}

// updateStatus writes the Ready condition and observedGeneration, and
// records an Event when Ready changes or the outcome asks for one.
func (r *Reconciler) updateStatus(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, out readiness) error {
	before := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady)
	changedReason := before == nil || before.Status != out.status || before.Reason != out.reason

	reportReady(vc.Name, out.status == metav1.ConditionTrue, out.reason)
	patch := client.MergeFrom(vc.DeepCopy())
	changed := meta.SetStatusCondition(&vc.Status.Conditions, metav1.Condition{
		Type:               tenantryv1alpha1.ConditionReady,
		Status:             out.status,
		Reason:             out.reason,
		Message:            out.message,
		ObservedGeneration: vc.Generation,
	})
	if vc.Status.ObservedGeneration != vc.Generation {
		vc.Status.ObservedGeneration = vc.Generation
		changed = true
	}
	if vc.Status.Replica != r.Replica {
		vc.Status.Replica = r.Replica
		changed = true
	}
	if changed {
		if err := r.fenced(vc.Name); err != nil {
			return err
		}
		read := vc.ResourceVersion
		if err := r.Client.Status().Patch(ctx, vc, patch); err != nil {
			return fmt.Errorf("updating status of %s: %w", vc.Name, err)
		}
		r.wrote(vc.Name, read)
	}

	switch {
	case out.event != "":
		r.Recorder.Eventf(vc, nil, out.event, out.reason, out.action, "%s", out.message)
	case changedReason:
		eventType := corev1.EventTypeNormal
		if out.status != metav1.ConditionTrue && out.reason != tenantryv1alpha1.ReasonPaused {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(vc, nil, eventType, out.reason, "Reconcile", "%s", out.message)
	}
	return nil
}

// ownWritesRecheck is when a VirtualCluster read from behind the
// reconciler's own writes is looked at again, should the watch event of
// those writes not come first.
const ownWritesRecheck = time.Second

// wrote records that a write of VirtualCluster name replaced it at
// resourceVersion read.
func (r *Reconciler) wrote(name, read string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.superseded == nil {
		r.superseded = map[string][]string{}
	}
	r.superseded[name] = append(r.superseded[name], read)
}

// behindOwnWrites says whether vc was read at a resourceVersion that the
// reconciler's own writes replaced. A read past them (the writes seen, or
// someone else's later write) forgets them.
func (r *Reconciler) behindOwnWrites(vc *tenantryv1alpha1.VirtualCluster) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Contains(r.superseded[vc.Name], vc.ResourceVersion) {
		return true
	}
	delete(r.superseded, vc.Name)
	return false
}

func (r *Reconciler) digest(name string) [sha256.Size]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spawnedFrom[name]
}

func (r *Reconciler) setDigest(name string, d [sha256.Size]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spawnedFrom == nil {
		r.spawnedFrom = map[string][sha256.Size]byte{}
	}
	if d == ([sha256.Size]byte{}) {
		delete(r.spawnedFrom, name)
		return
	}
	r.spawnedFrom[name] = d
}

func ready() readiness {
	return readiness{status: metav1.ConditionTrue, reason: tenantryv1alpha1.ReasonSpawned,
		message: "The tenant cluster's controllers are running."}
}

func notReady(reason, message string, retry error) readiness {
	return readiness{status: metav1.ConditionFalse, reason: reason, message: message, retry: retry}
}
