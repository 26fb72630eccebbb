package virtualcluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/sharding"
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
	// Waker, if set, answers for the API servers of the sleeping control
	// planes that this replica runs, so that a request wakes them.
	Waker Waker

	// secrets are the kubeconfig Secrets read, by version.
	secrets kubeconfigSecrets
	// certificates are the running clusters' client certificates, renewed
	// in place.
	certificates clientCertificates

	mu sync.Mutex
	// digests are, per running cluster, the digest of what it was spawned
	// from (its kubeconfig and respawnInputs), to tell a change from none.
	digests map[string][sha256.Size]byte
	// superseded holds, per VirtualCluster, the resourceVersions that the
	// reconciler's own writes of it replaced since the cache last caught
	// up: a VirtualCluster read at one of them comes from a cache that has
	// not seen those writes yet.
	superseded map[string][]string
	// overLimit holds, per cluster past its cache limits, when to spawn
	// it again.
	overLimit map[string]overLimit
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

// Waker answers for the API servers of sleeping control planes
// (waker.Waker).
type Waker interface {
	// Hold answers for cluster's API server from now on.
	Hold(ctx context.Context, cluster string) error
	// Release stops answering for it, once its control plane answers.
	Release(ctx context.Context, cluster string) error
	// Holds says whether it answers for cluster.
	Holds(cluster string) bool
	// Forget stops answering for cluster at once: it is gone, or another
	// replica runs it.
	Forget(cluster string)
}

// readiness is what a reconcile found out: the Ready condition to report,
// and whether to retry with backoff.
type readiness struct {
	status  metav1.ConditionStatus
	reason  string
	message string
	retry   error
	// after, with no retry, is when to look again.
	after  time.Duration
	event  string // eventtype when the outcome deserves an event beyond a transition
	action string
	// transient: the kubeconfig could not be read this time, which says
	// nothing about it (see loadKubeconfig).
	transient bool
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		// Its status and finalizers are written under lock, beside the
		// control plane controller's and the syncers' writes: read again.
		ctrl.LoggerFrom(ctx).V(1).Info("retrying: the VirtualCluster changed meanwhile", "cluster", req.Name, "error", err.Error())
		return ctrl.Result{RequeueAfter: conflictRequeue}, nil
	}
	return res, err
}

// conflictRequeue is when a VirtualCluster written meanwhile by another is
// looked at again.
const conflictRequeue = time.Second

func (r *Reconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
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
		patch := client.MergeFromWithOptions(vc.DeepCopy(), client.MergeFromWithOptimisticLock{})
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
	if outcome.retry != nil {
		return ctrl.Result{}, outcome.retry
	}
	return ctrl.Result{RequeueAfter: outcome.after}, nil
}

// reconcileCluster brings the registry in line with vc's spec, and kc,
// the kubeconfig it names, and has the Waker answer for its control
// plane's API server while it sleeps.
func (r *Reconciler) reconcileCluster(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, kc kubeconfig) readiness {
	out := r.reconcileApp(ctx, vc, kc)
	// After the app: a sleeping tenant's syncers are stopped before its
	// Service leads to the Waker, and the Waker's trouble stops nothing
	// else.
	if err := r.answerWhileAsleep(ctx, vc); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "answering for the sleeping control plane's API server; retrying")
		out.retry = errors.Join(out.retry, err)
		if vc.Asleep() {
			out.message += fmt.Sprintf(" A request to its API server does not wake it yet: %v", err)
		}
	}
	return out
}

// reconcileApp brings the registry in line with vc's spec, and kc.
func (r *Reconciler) reconcileApp(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, kc kubeconfig) readiness {
	name := vc.Name
	if vc.Spec.Paused {
		if err := r.stop(ctx, name); err != nil {
			return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Stopping the paused cluster: %v", err), err)
		}
		return readiness{status: metav1.ConditionFalse, reason: tenantryv1alpha1.ReasonPaused,
			message: "Syncing is paused; nothing was deleted."}
	}
	if vc.Asleep() {
		// Its controllers first, so that none writes of the Pods that go.
		if err := r.stop(ctx, name); err != nil {
			return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Stopping the sleeping cluster: %v", err), err)
		}
		if err := r.deleteHostPods(ctx, vc); err != nil {
			return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Deleting the sleeping cluster's Pods in the host: %v", err), err)
		}
		out := readiness{status: metav1.ConditionFalse, reason: tenantryv1alpha1.ReasonSleepRequested,
			message: "Asleep: its controllers are stopped, and none of its Pods runs in the host; its objects and their other host copies stay. tenantry wake wakes it."}
		if r.Waker != nil {
			out.message += " So does a request to its API server."
			// Its renewed certificates serve the requests that wake it.
			out.after = asleepRecheck
		}
		return out
	}

	if vc.Spec.ControlPlane != nil {
		// A control plane that Tenantry runs: synced once it first runs;
		// one that restarts later keeps its syncers, which retry.
		cp := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady)
		if status, err := r.Registry.Status(name); (err != nil || status.State != clusterregistry.StateRunning) && (cp == nil || cp.Status != metav1.ConditionTrue) {
			msg := "The control plane Tenantry runs for the cluster is not ready yet."
			if cp != nil {
				msg = fmt.Sprintf("The control plane Tenantry runs for the cluster is not ready (%s): %s", cp.Reason, cp.Message)
			}
			return readiness{status: metav1.ConditionFalse, reason: tenantryv1alpha1.ReasonControlPlaneNotReady, message: msg}
		}
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
		if renewed, err := r.certificates.renew(name, config); err != nil {
			return notReady(tenantryv1alpha1.ReasonInvalidKubeconfig, fmt.Sprintf("The renewed client certificate: %v", err), err)
		} else if renewed {
			ctrl.LoggerFrom(ctx).Info("renewed the client certificate of the running cluster in place")
			r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "ClientCertificateRenewed", "Renew",
				"The tenant cluster's controllers present the kubeconfig's renewed client certificate from now on, without a restart.")
		}
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

	if err == nil && status.State == clusterregistry.StateFailed && errors.Is(status.Err, clusterregistry.ErrCacheLimit) {
		// Under the spec it ran with: a changed one is tried at once.
		r.wentOverLimit(name, r.digest(name), status.Err, time.Now())
	}
	if next, why := r.overLimitUntil(name, digest, time.Now()); !next.IsZero() {
		out := notReady(tenantryv1alpha1.ReasonCacheLimitExceeded, cacheLimitMessage(next, why), nil)
		out.after = time.Until(next)
		return out
	}

	action := "Spawn"
	if err == nil {
		// Running from another kubeconfig, or failed: start afresh.
		action = "Respawn"
		why := "its kubeconfig Secret or its spec changed"
		if status.State == clusterregistry.StateFailed {
			why = fmt.Sprintf("it failed: %v", status.Err)
		}
		ctrl.LoggerFrom(ctx).Info("re-spawning cluster", "because", why)
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "Respawning", action, "Re-spawning the cluster because %s", why)
		if err := r.stop(ctx, name); err != nil {
			return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Stopping the cluster before re-spawning it: %v", err), err)
		}
	}

	config, err = r.certificates.spawnConfig(name, config)
	if err != nil {
		return notReady(tenantryv1alpha1.ReasonInvalidKubeconfig, fmt.Sprintf("The kubeconfig's client certificate: %v", err), err)
	}
	if err := r.Registry.Spawn(name, config); err != nil {
		switch {
		case errors.Is(err, clusterregistry.ErrClosed):
			return readiness{retry: err}
		case errors.Is(err, clusterregistry.ErrUnreachable):
			return notReady(tenantryv1alpha1.ReasonUnreachable, fmt.Sprintf("The tenant API server did not answer: %v", err), err)
		case errors.Is(err, clusterregistry.ErrCacheLimit):
			now := time.Now()
			next := r.wentOverLimit(name, digest, err, now)
			out := notReady(tenantryv1alpha1.ReasonCacheLimitExceeded, cacheLimitMessage(next, err), nil)
			out.after = next.Sub(now)
			return out
		default:
			return notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Starting the cluster's controllers failed: %v", err), err)
		}
	}
	r.setDigest(name, digest)
	r.withinLimit(name)
	out := ready()
	out.event, out.action = corev1.EventTypeNormal, action
	return out
}

// asleepRecheck is how often a sleeping control plane's certificates are
// read again for the Waker.
const asleepRecheck = time.Hour

// answerWhileAsleep has the Waker answer for the API server of vc's
// control plane while it sleeps, and while it wakes for a request the
// Waker held; and stop once it answers itself. An EndpointSlice that
// another replica left (it stopped while the control plane woke) goes
// too: its port answers no more.
func (r *Reconciler) answerWhileAsleep(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) error {
	if r.Waker == nil || vc.Spec.ControlPlane == nil {
		return nil
	}
	if vc.Asleep() {
		return r.Waker.Hold(ctx, vc.Name)
	}
	if meta.IsStatusConditionTrue(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady) || !r.Waker.Holds(vc.Name) {
		return r.Waker.Release(ctx, vc.Name)
	}
	return nil
}

// clusterIDTimeout bounds the tenant request that tells it from the host.
const clusterIDTimeout = 10 * time.Second

// forget stops keeping cluster name's virtual nodes alive, and takes
// its Ready series off this replica's metrics: it is gone, being deleted,
// or another replica runs it.
func (r *Reconciler) forget(name string) {
	forgetReady(name)
	r.withinLimit(name)
	r.mu.Lock()
	delete(r.superseded, name)
	r.mu.Unlock()
	if r.Nodes != nil {
		r.Nodes.Forget(name)
	}
	if r.Waker != nil {
		r.Waker.Forget(name)
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
		r.certificates.drop(name)
		return nil
	}
	return fmt.Errorf("stopping cluster %s: %w", name, err)
}

func ready() readiness {
	return readiness{status: metav1.ConditionTrue, reason: tenantryv1alpha1.ReasonSpawned,
		message: "The tenant cluster's controllers are running."}
}

// cacheLimitMessage is the Ready message of a tenant past its cache
// limits, spawned again at next: the same at every reconcile until then.
func cacheLimitMessage(next time.Time, err error) string {
	return fmt.Sprintf("The tenant cluster holds more than the manager may hold of it (spec.hostPolicy.cache), so it is not synced; "+
		"trying again at %s, and at once when its spec changes: %v", next.UTC().Format(time.TimeOnly), err)
}

func notReady(reason, message string, retry error) readiness {
	return readiness{status: metav1.ConditionFalse, reason: reason, message: message, retry: retry}
}
